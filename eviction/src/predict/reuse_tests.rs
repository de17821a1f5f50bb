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

#[test]
fn a_block_used_often_is_ranked_by_its_own_returns_not_those_of_blocks_used_once() {
    // Ten hot blocks (a shared system prompt) come back every 5 steps; conversation blocks
    // (used once so far) come back 100 steps later. Both idle 3: the hot one is due now, the
    // once-used one not for ~97 steps; a single histogram would rank them alike.
    let mut p = ReuseHist::new();
    for t in 0..4000u64 {
        access(&mut p, 1_000_000 + t, t);
        if t >= 100 && t % 2 == 0 {
            access(&mut p, 1_000_000 + t - 100, t);
        }
        if t % 5 == 0 {
            (0..10).for_each(|h| access(&mut p, h, t));
        }
    }
    p.tick(4003);
    let mut out = Vec::new();
    assert!(p.predict(&[(3, 4000), (1_000_000 + 4000, 4000)], &mut out));
    let (hot, once) = (out[0], out[1]);
    assert!(
        hot < once,
        "hot {hot} should be due before once-used {once}"
    );
    assert!(hot < 4003.0 + 10.0, "hot {hot}");
}

/// Requests 0..2000 of `trained()`, then request 2001: block 1999 returns, 1998 never does.
fn future_where_1999_returns() -> std::sync::Arc<crate::future::FutureIndex> {
    let mut reqs: Vec<Vec<BlockId>> = (0..2000u64).map(|t| vec![t]).collect();
    reqs.push(vec![]);
    reqs.push(vec![1999]);
    std::sync::Arc::new(crate::future::FutureIndex::new(
        reqs.iter().map(Vec::as_slice),
    ))
}

#[test]
fn told_whether_a_block_returns_it_predicts_never_only_for_those_that_do_not() {
    let mut p = trained().knowing_whether(future_where_1999_returns());
    let mut out = Vec::new();
    assert!(p.predict(&[(1999, 1999), (1998, 1998)], &mut out));
    assert!(out[0] < NEVER, "block 1999 returns: {}", out[0]);
    assert_eq!(out[1], NEVER, "block 1998 never returns");
}

#[test]
fn told_when_a_block_returns_it_cannot_tell_one_that_does_not() {
    let mut p = trained().knowing_when(future_where_1999_returns(), 7);
    let mut out = Vec::new();
    assert!(p.predict(&[(1999, 1999), (1998, 1998), (3, 0)], &mut out));
    let (returns, phantom, stale) = (out[0], out[1], out[2]);
    // Due in 1 request, over the chance of a reuse at age 1 (about a half here).
    assert!(
        returns > 2000.0 && returns < 2000.0 + 10.0,
        "returns {returns}"
    );
    // Not told it never returns: a phantom return within the reuses seen (~100 requests).
    assert!(phantom < NEVER, "phantom {phantom}");
    assert!(phantom > returns, "phantom {phantom} returns {returns}");
    // Idle past every reuse seen: no phantom to draw.
    assert_eq!(stale, NEVER);
}
