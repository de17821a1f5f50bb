//! Unit tests of `own`.

use super::*;

#[test]
fn a_call_counts_when_sent_and_leaves_flight_when_dropped() {
    let m = Metrics::new().expect("metrics");
    let vecs = OwnMetricVecs::new(&m).expect("register");
    let call = vecs.sent("a:1", CANARY, 97);
    let text = String::from_utf8(m.render()).expect("utf-8");
    for want in [
        "recache_own_requests_total{upstream=\"a:1\",what=\"canary\"} 1",
        "recache_own_tokens_total{kind=\"prompt\",upstream=\"a:1\",what=\"canary\"} 97",
        "recache_own_in_flight{upstream=\"a:1\"} 1",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    call.cached(64);
    drop(call);
    let text = String::from_utf8(m.render()).expect("utf-8");
    for want in [
        "recache_own_tokens_total{kind=\"cached\",upstream=\"a:1\",what=\"canary\"} 64",
        "recache_own_in_flight{upstream=\"a:1\"} 0",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    OwnCall::uncounted().cached(5);
}
