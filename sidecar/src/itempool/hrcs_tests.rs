//! Unit tests of `itempool::hrcs`.

use super::*;

#[test]
fn parses_any_subset_and_refuses_the_rest() {
    let c = Costs::parse("fetch=1000, alpha=0.5").expect("parse");
    assert_eq!(c.fetch_tokens_per_s, 1000.0);
    assert_eq!(c.alpha, 0.5);
    assert_eq!(
        c.prefill_tokens_per_s,
        Costs::default().prefill_tokens_per_s
    );
    assert_eq!(Costs::parse("").expect("empty"), Costs::default());
    for bad in ["fetch", "fetch=x", "fetch=-1", "speed=3", "alpha=inf"] {
        assert!(Costs::parse(bad).is_err(), "{bad} refused");
    }
}

#[test]
fn the_testbeds_costs_replicate_nothing_a_slow_network_replicates_the_hottest() {
    // 100 candidates of 19 tokens, 300 user tokens, 2 replicas.
    let shape = (100.0, 300.0, 19.0);
    assert_eq!(hot_share(&Costs::default(), shape, 2), 0.0);
    // B at 20x the prefill rate: R_max = 0.1 * (300/876) * 17520 * 0.5 / 1900 = 0.158.
    let slow = Costs {
        fetch_tokens_per_s: 876.0 * 20.0,
        ..Costs::default()
    };
    let share = hot_share(&slow, shape, 2);
    assert!(
        (share - (1.0 - 0.1 * 300.0 * 20.0 * 0.5 / 1900.0)).abs() < 1e-9,
        "{share}"
    );
    // More replicas: more of an even shard is remote, so more may come from the store.
    assert!(hot_share(&slow, shape, 8) < share);
    assert_eq!(
        hot_share(&slow, shape, 1),
        1.0,
        "one replica: its pool is all there is"
    );
}

#[test]
fn the_shape_is_the_mean_of_what_was_ranked() {
    let s = Shape::default();
    assert_eq!(s.mean(19.0), (100.0, 1900.0, 19.0), "before any request");
    s.record(100, 300, 2000);
    s.record(50, 100, 1000);
    assert_eq!(s.mean(19.0), (75.0, 200.0, 20.0));
}

#[test]
fn given_names_the_rates_a_spec_fixes() {
    assert_eq!(Given::of(None), Given::default());
    assert_eq!(
        Given::of(Some("alpha=0.5, prefill=7000")),
        Given {
            fetch: false,
            prefill: true
        }
    );
    assert_eq!(
        Given::of(Some("fetch=1e5,prefill=7000")),
        Given {
            fetch: true,
            prefill: true
        }
    );
    assert_eq!(Given::of(Some("fetch=x")), Given::default(), "refused");
}
