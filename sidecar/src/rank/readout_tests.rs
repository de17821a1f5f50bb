//! Unit tests of `rank::readout`.

use super::*;
use crate::rank::layout;
use crate::rank::select::PrefixKind;

fn prompt() -> Prompt {
    let items: Vec<&[u32]> = vec![&[70, 71], &[80]];
    layout::build(PrefixKind::User, &[1, 2], &items, &[1, 0], &[9], 100)
}

#[test]
fn item_scores_each_candidate_by_its_first_token_and_keeps_the_prompt() {
    let mut p = prompt();
    let tokens = p.tokens.clone();
    apply(
        &mut p,
        &[&[70, 71], &[80]],
        &["a", "b"],
        Readout::Item,
        false,
    )
    .expect("distinct");
    assert_eq!(p.labels, vec![(80, 1), (70, 0)]);
    assert_eq!(p.tokens, tokens, "the prompt's tokens do not change");
    let mut q = prompt();
    apply(
        &mut q,
        &[&[70, 71], &[80]],
        &["a", "b"],
        Readout::Label,
        true,
    )
    .expect("label");
    assert_eq!(q, prompt());
}

#[test]
fn shared_first_tokens_are_refused_naming_both_items() {
    let items: Vec<&[u32]> = vec![&[70, 71], &[70, 72]];
    let mut p = layout::build(PrefixKind::User, &[1], &items, &[0, 1], &[9], 100);
    let e = apply(&mut p, &items, &["a", "b"], Readout::Item, true).expect_err("ambiguous");
    let msg = e.to_string();
    assert!(
        msg.contains("\"a\"") && msg.contains("\"b\"") && msg.contains("70"),
        "{msg}"
    );
}

/// `auto` reads the item token only in a pooled prompt whose candidates start with
/// distinct tokens, and never refuses a request.
#[test]
fn auto_reads_items_only_when_pooled_and_distinct() {
    let distinct: Vec<&[u32]> = vec![&[70, 71], &[80]];
    let shared: Vec<&[u32]> = vec![&[70, 71], &[70, 72]];
    let empty: Vec<&[u32]> = vec![&[70], &[]];
    assert_eq!(Readout::Auto.resolve(true, &distinct), Readout::Item);
    assert_eq!(Readout::Auto.resolve(false, &distinct), Readout::Label);
    assert_eq!(Readout::Auto.resolve(true, &shared), Readout::Label);
    assert_eq!(Readout::Auto.resolve(true, &empty), Readout::Label);
    assert_eq!(Readout::Label.resolve(true, &distinct), Readout::Label);
    assert_eq!(Readout::Item.resolve(false, &shared), Readout::Item);
    let mut p = layout::build(PrefixKind::User, &[1], &shared, &[0, 1], &[9], 100);
    let labelled = p.clone();
    let used = apply(&mut p, &shared, &["a", "b"], Readout::Auto, true).expect("no refusal");
    assert_eq!((used, p), (Readout::Label, labelled));
    let mut p = prompt();
    let used = apply(&mut p, &distinct, &["a", "b"], Readout::Auto, true).expect("item");
    assert_eq!((used, p.labels), (Readout::Item, vec![(80, 1), (70, 0)]));
}

#[test]
fn parses_and_prints() {
    assert_eq!("auto".parse::<Readout>(), Ok(Readout::Auto));
    assert_eq!(Readout::default(), Readout::Auto);
    assert_eq!("item".parse::<Readout>(), Ok(Readout::Item));
    assert_eq!(Readout::Label.to_string(), "label");
    assert!("logit".parse::<Readout>().is_err());
    let v: Readout = serde_json::from_str("\"item\"").expect("serde");
    assert_eq!(v, Readout::Item);
}
