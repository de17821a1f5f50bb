//! Unit tests of `itempool::recompute`.

use super::*;

#[test]
fn parses_and_prints_back() {
    for s in ["none", "none:pos=true", "link:k=2", "link:k=1:pos=true"] {
        let spec: RecomputeSpec = s.parse().expect(s);
        assert_eq!(spec.to_string(), s);
    }
    let shared: RecomputeSpec = "link:k=3:pos=shared".parse().expect("shared");
    assert_eq!(shared.to_string(), "link:k=3");
}

#[test]
fn refuses_what_it_cannot_run() {
    for s in [
        "",
        "blend",
        "link",
        "link:k=0",
        "link:k=x",
        "none:k=1",
        "none:pos=maybe",
        "link:k=1:colour=red",
        "link:k",
    ] {
        let e = s.parse::<RecomputeSpec>().expect_err(s);
        assert!(e.to_string().contains("expected none"), "{e}");
    }
}

#[test]
fn link_tokens_take_each_items_first_k() {
    let spec: RecomputeSpec = "link:k=2".parse().expect("spec");
    let a: &[u32] = &[100, 1, 2];
    let b: &[u32] = &[101];
    assert_eq!(spec.link_tokens(&[a, b]), vec![100, 1, 101]);
    assert!(RecomputeSpec::default().link_tokens(&[a, b]).is_empty());
    assert_eq!(spec.segment_pos(7), 0);
    let t: RecomputeSpec = "none:pos=true".parse().expect("spec");
    assert_eq!(t.segment_pos(7), 7);
}
