//! Unit tests of `client::replica`.

use super::*;

#[test]
fn one_late_probe_does_not_eject_two_in_a_row_do() {
    let a = Replica::new("http://a:1".parse().expect("uri"));
    assert!(a.record_probe(false, 0), "one failed probe keeps it in");
    assert!(
        !a.record_probe(false, 0),
        "the second in a row takes it out"
    );
    assert!(a.record_probe(true, 0), "a good probe takes it back");
    assert!(a.record_probe(false, 0));
}

#[test]
fn keeps_prefixes_and_exports_health_and_load() {
    let m = Metrics::new().expect("metrics");
    let b = Arc::new(Replica::with_metrics(
        "http://b:2/engine".parse().expect("uri"),
        &m,
        Duration::from_millis(500),
    ));
    let pq: PathAndQuery = "/v1/models?x=1".parse().expect("pq");
    assert_eq!(
        b.uri_for(Some(&pq)).expect("uri").to_string(),
        "http://b:2/engine/v1/models?x=1"
    );
    assert_eq!(b.label, "b:2/engine");
    assert_eq!(b.origin_for(Some(&pq)), "/engine/v1/models?x=1");
    assert_eq!(b.host, "b:2");
    let guard = InFlight::new(b.clone());
    b.set_healthy(false);
    b.count_failure(FailureKind::Connect);
    let text = String::from_utf8(m.render()).expect("utf8");
    assert!(
        text.contains(r#"recache_upstream_in_flight_requests{upstream="b:2/engine"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"recache_upstream_healthy{upstream="b:2/engine"} 0"#),
        "{text}"
    );
    assert!(
        text.contains(r#"kind="connect",upstream="b:2/engine"} 1"#),
        "{text}"
    );
    drop(guard);
    assert_eq!(b.in_flight(), 0);
}
