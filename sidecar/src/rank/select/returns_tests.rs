//! Unit tests of `rank::select::returns`.

use super::*;

#[test]
fn learns_the_return_share_per_visit_count() {
    let mut r = Returns::default();
    assert_eq!(r.share(1), 0.0, "no returns seen: assume none");
    assert!(!r.repays(1, 4000, 1900));
    // 9 users visit once; 3 of them come back.
    for _ in 0..9 {
        r.visit(1);
    }
    for _ in 0..3 {
        r.visit(2);
    }
    // Bucket 1: 3 of 9, shrunk towards all buckets' 3/13 with weight 4: (3 + 4*3/13) / 13.
    let r1 = (3.0 + 4.0 * 3.0 / 13.0) / 13.0;
    assert!((r.share(1) - r1).abs() < 1e-9);
    // r/(1-r) = 0.33: pays when 0.33 (τ_u - τ_i) > τ_i, i.e. τ_u > ~4 τ_i.
    assert!(!r.repays(1, 4000, 1900));
    assert!(r.repays(1, 9000, 1900));
    assert!(r.repays(1, 100, 0), "nothing to give up now");
    assert!(!r.repays(1, 1900, 1900));
}
