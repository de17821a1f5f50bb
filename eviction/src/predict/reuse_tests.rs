//! Unit tests of `predict::reuse`.

use super::*;
use crate::policy::RequestCtx;

fn access(p: &mut ReuseHist, block: BlockId, time: u64) {
    p.observe(&AccessEvent {
        block,
        depth: 0,
        time,
        ctx: RequestCtx::default(),
    });
}

/// Conversations that come back 100 requests later, half of them once only.
fn trained() -> ReuseHist {
    let mut p = ReuseHist::new();
    for t in 0..2000u64 {
        access(&mut p, t, t);
        if t >= 100 && t % 2 == 0 {
            access(&mut p, t - 100, t);
        }
    }
    p.tick(2000);
    p
}

#[test]
fn no_prediction_before_enough_reuses() {
    let mut p = ReuseHist::new();
    access(&mut p, 1, 0);
    access(&mut p, 1, 5);
    let mut out = Vec::new();
    assert!(p.model_version().is_none());
    assert!(
        !p.predict(&[(1, 5)], &mut out),
        "no model: the policy runs as LRU"
    );
}

#[test]
fn a_block_near_its_usual_return_ranks_before_a_fresh_one_and_a_stale_one() {
    let mut p = trained();
    let mut out = Vec::new();
    // Idle 1 (just used), 90 (due in ~10), 5,000 (far past every return seen).
    assert!(p.predict(&[(1, 1999), (2, 1910), (3, 0)], &mut out));
    let (fresh, due, stale) = (out[0], out[1], out[2]);
    assert!(due < fresh, "due {due} should come before fresh {fresh}");
    assert!(fresh < stale, "stale {stale} should be furthest");
    assert_eq!(stale, NEVER);
}

#[test]
fn a_second_touch_in_one_request_is_not_a_reuse() {
    let mut p = ReuseHist::new();
    for b in 0..100 {
        access(&mut p, b, 7);
        access(&mut p, b, 7);
    }
    assert!(p.model_version().is_none());
}

#[test]
fn predictions_are_due_again_when_the_age_changes_bin() {
    let p = ReuseHist::new();
    let at = p.repredict_at(100, 110).expect("an age-based predictor");
    assert!(at > 110, "{at}");
    assert!(bin(at - 100) > bin(10));
    assert_eq!(bin(at - 100 - 1), bin(10));
}
