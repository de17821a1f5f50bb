//! Unit tests of `itempool::store_probe`.

use super::*;

#[test]
fn addresses_of_both_stores() {
    assert_eq!(address("10.0.0.2:50051").as_deref(), Some("10.0.0.2:50051"));
    assert_eq!(
        address("redis://cache:6379/0").as_deref(),
        Some("cache:6379")
    );
    assert_eq!(address("redis://cache:6379").as_deref(), Some("cache:6379"));
    for bad in [
        "mooncake-master",
        ":50051",
        "http://x:1",
        "redis://cache",
        "h:99999",
    ] {
        assert_eq!(address(bad), None, "{bad}");
    }
}

#[tokio::test]
async fn reports_a_listening_store_and_a_closed_port() {
    let registry = crate::metrics::Metrics::new().expect("registry");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let probe = StoreProbe::new(&addr, &registry).expect("probe");
    assert_eq!(probe.detail()["reachable"], Value::Null, "not probed yet");
    assert!(probe.check().await);
    assert_eq!(probe.detail()["reachable"], json!(true));
    assert_eq!(probe.up.get(), 1);
    drop(listener);
    assert!(!probe.check().await, "nothing listens any more");
    let d = probe.detail();
    assert_eq!(d["reachable"], json!(false));
    assert!(d["error"].as_str().is_some_and(|e| !e.is_empty()), "{d}");
    assert_eq!(probe.up.get(), 0);
}
