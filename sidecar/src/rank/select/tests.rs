//! Unit tests of `rank::select`.

use super::*;

#[test]
fn factory_builds_each_kind_and_config_round_trips() {
    let configs = [
        SelectorConfig::Bat {
            window: 10,
            user_cache_tokens: 100,
            admission: true,
            repay: false,
        },
        SelectorConfig::Agnostic,
        SelectorConfig::UserPrefix,
        SelectorConfig::ItemPrefix,
    ];
    let names: Vec<_> = configs.iter().map(|c| build(c).name()).collect();
    assert_eq!(names, ["bat", "agnostic", "user_prefix", "item_prefix"]);
    let json = serde_json::to_string(&configs[0]).expect("json");
    assert_eq!(
        json,
        r#"{"kind":"bat","window":10,"user_cache_tokens":100,"admission":true,"repay":false}"#
    );
    let old: SelectorConfig =
        serde_json::from_str(r#"{"kind":"bat","window":10,"user_cache_tokens":100}"#)
            .expect("parse without admission");
    assert_eq!(old, configs[0]);
    let back: SelectorConfig = serde_json::from_str(&json).expect("parse");
    assert_eq!(back, configs[0]);
}

#[test]
fn fixed_and_agnostic_rules() {
    let input = |u, i| SelectInput {
        user: "u",
        user_tokens: u,
        item_tokens: i,
        reusable_item_tokens: i,
        engine: None,
        pool_after_user: false,
    };
    let agn = agnostic::Agnostic;
    assert_eq!(agn.choose(&input(2000, 1800)), PrefixKind::User);
    assert_eq!(agn.choose(&input(1800, 1800)), PrefixKind::User);
    assert_eq!(agn.choose(&input(1000, 1800)), PrefixKind::Item);
    assert_eq!(fixed_user::FixedUser.choose(&input(1, 9)), PrefixKind::User);
    assert_eq!(fixed_item::FixedItem.choose(&input(9, 1)), PrefixKind::Item);
}
