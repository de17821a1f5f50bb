//! Unit tests of `rank::config`.

use super::*;

#[test]
fn defaults_are_unchanged() {
    let c = RankArgs::default().resolve();
    assert_eq!((c.label_base, c.max_items), (256, 128));
    assert!(c.item_pool.is_none());
    let c = RankArgs {
        pool: PoolArgs {
            rank_item_pool: Some(10),
            ..Default::default()
        },
        ..Default::default()
    }
    .resolve();
    let pool = c.item_pool.expect("pool");
    assert_eq!((pool.items, pool.fills), (10, 32));
    assert_eq!(
        pool.refresh_per_s,
        crate::itempool::config::DEFAULT_POOL_REFRESH_PER_S
    );
}

#[test]
fn each_unusable_value_names_its_flag() {
    let cases = [
        (
            RankArgs {
                rank_window: Some(0),
                ..Default::default()
            },
            "--rank-window",
        ),
        (
            RankArgs {
                rank_max_items: Some(0),
                ..Default::default()
            },
            "--rank-max-items",
        ),
        (
            RankArgs {
                pool: PoolArgs {
                    rank_item_pool_fills: Some(0),
                    ..Default::default()
                },
                ..Default::default()
            },
            "--rank-item-pool-fills",
        ),
        (
            RankArgs {
                pool: PoolArgs {
                    rank_item_pool_refresh: Some(-1.0),
                    ..Default::default()
                },
                ..Default::default()
            },
            "--rank-item-pool-refresh",
        ),
        (
            RankArgs {
                pool: PoolArgs {
                    rank_pool_store: Some("127.0.0.1:50051".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            "--rank-pool-store",
        ),
        (
            RankArgs {
                pool: PoolArgs {
                    rank_item_pool: Some(4),
                    rank_pool_store: Some("mooncake-master".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            "--rank-pool-store",
        ),
        (
            RankArgs {
                pool: PoolArgs {
                    rank_pool_costs: Some("fetch=fast".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            "--rank-pool-costs",
        ),
        (
            RankArgs {
                pool: PoolArgs {
                    rank_item_pool_refresh: Some(f64::NAN),
                    ..Default::default()
                },
                ..Default::default()
            },
            "--rank-item-pool-refresh",
        ),
        (
            RankArgs {
                pool: PoolArgs {
                    rank_item_catalog: Some("c.jsonl".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
            "--rank-item-catalog",
        ),
        (
            RankArgs {
                rank_pool_recompute: Some("blend".into()),
                ..Default::default()
            },
            "--rank-pool-recompute",
        ),
        (
            RankArgs {
                rank_quality_sample: Some(1.5),
                ..Default::default()
            },
            "--rank-quality-sample",
        ),
        (
            RankArgs {
                rank_quality_min: Some(f64::NAN),
                ..Default::default()
            },
            "--rank-quality-min",
        ),
    ];
    for (args, setting) in cases {
        assert_eq!(
            args.try_resolve_for(false).expect_err(setting).setting,
            setting
        );
    }
}
