//! Unit tests of `metrics`.

use super::*;

#[test]
fn normalises_routes_and_renders() {
    assert_eq!(route_label("/v1/completions"), "/v1/completions");
    assert_eq!(route_label("/some/random/path"), "other");
    let m = Metrics::new().expect("metrics");
    m.observe("/v1/models", 200, 0.001);
    let text = String::from_utf8(m.render()).expect("utf8");
    assert!(text.contains(r#"recache_requests_total{route="/v1/models",status="200"} 1"#));
}
