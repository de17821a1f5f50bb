//! Unit tests of `rank::guard::agreement`.

use super::*;

#[test]
fn same_order_agrees_fully_and_reversed_not_at_all() {
    let a: Vec<f64> = (0..20).map(f64::from).collect();
    let same: Vec<f64> = a.iter().map(|x| 2.0 * x - 5.0).collect();
    let ag = agreement(&a, &same).expect("agreement");
    assert_eq!((ag.top_k_overlap, ag.spearman), (1.0, 1.0));
    let rev: Vec<f64> = a.iter().map(|x| -x).collect();
    let ag = agreement(&a, &rev).expect("agreement");
    assert_eq!(ag.top_k_overlap, 0.0);
    assert!((ag.spearman + 1.0).abs() < 1e-12, "{ag:?}");
}

#[test]
fn overlap_counts_shared_top_items_only() {
    // 12 candidates: the top 10 of b swaps two of a's top 10 for a's bottom two.
    let a: Vec<f64> = (0..12).map(|i| -f64::from(i)).collect();
    let mut b = a.clone();
    b.swap(0, 11);
    b.swap(1, 10);
    let ag = agreement(&a, &b).expect("agreement");
    assert!((ag.top_k_overlap - 0.8).abs() < 1e-12, "{ag:?}");
    assert!(ag.spearman < 1.0);
}

#[test]
fn few_candidates_and_mismatches() {
    let ag = agreement(&[1.0, 2.0], &[2.0, 1.0]).expect("agreement");
    assert_eq!(ag.top_k_overlap, 1.0); // k = 2: both candidates are everyone's top
    assert_eq!(agreement(&[1.0], &[1.0]).map(|a| a.spearman), Some(1.0));
    assert!(agreement(&[], &[]).is_none());
    assert!(agreement(&[1.0], &[1.0, 2.0]).is_none());
    let nan = agreement(&[f64::NAN, 1.0], &[0.0, 1.0]).expect("nan ranks, no panic");
    assert!(nan.spearman.is_finite());
}
