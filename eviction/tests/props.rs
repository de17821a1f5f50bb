//! Property tests: OPT is an upper bound for every policy, on single-chain
//! prefix requests and on multi-chain (GR-shaped) ones; on single-block
//! requests LARU with a perfect oracle makes exactly OPT's misses
//! (1-consistency).

mod common;

use common::{all_policies, multi_trace, prefix_trace, replay, replay_multi};
use proptest::prelude::*;
use recache_eviction::PolicyConfig;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn opt_hits_at_least_every_policy(
        steps in prop::collection::vec((0u8..12, 0u8..4), 1..300),
        capacity in 6usize..60,
        noise in prop::sample::select(vec![0.0, 0.5, 1.0]),
    ) {
        let trace = prefix_trace(&steps, 12);
        let opt = replay(&trace, &PolicyConfig::Opt {}, capacity, 0.0).expect("opt");
        for cfg in all_policies() {
            let r = replay(&trace, &cfg, capacity, noise).expect("policy");
            prop_assert!(opt.total_hits() >= r.total_hits(),
                "{} got {} hits, opt {}", cfg.name(), r.total_hits(), opt.total_hits());
        }
    }

    #[test]
    fn opt_hits_at_least_every_policy_on_multi_chain_requests(
        steps in prop::collection::vec((0u8..12, 0u8..4, 0u8..40), 1..300),
        capacity in 6usize..60,
        noise in prop::sample::select(vec![0.0, 0.5, 1.0]),
    ) {
        let trace = multi_trace(&steps, 12);
        let opt = replay_multi(&trace, &PolicyConfig::Opt {}, capacity, 0.0).expect("opt");
        for cfg in all_policies() {
            let r = replay_multi(&trace, &cfg, capacity, noise).expect("policy");
            prop_assert!(opt.total_hits() >= r.total_hits(),
                "{} got {} hits, opt {}", cfg.name(), r.total_hits(), opt.total_hits());
        }
    }

    #[test]
    fn laru_with_oracle_matches_opt_on_single_blocks(
        items in prop::collection::vec(0u64..40, 1..400),
        capacity in 1usize..20,
    ) {
        let trace: Vec<Vec<u64>> = items.iter().map(|&i| vec![i]).collect();
        let opt = replay(&trace, &PolicyConfig::Opt {}, capacity, 0.0).expect("opt");
        let laru = PolicyConfig::laru_with_features(None);
        let l = replay(&trace, &laru, capacity, 0.0).expect("laru");
        prop_assert_eq!(opt.total_hits(), l.total_hits());
        let strict = PolicyConfig::from_spec("laru:lambda_min_misses=1").expect("strict spec");
        let s = replay(&trace, &strict, capacity, 0.0).expect("laru strict");
        prop_assert_eq!(opt.total_hits(), s.total_hits());
    }
}
