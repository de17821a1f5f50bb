//! Unit tests of `rank::select::hotness`.

use super::*;

fn ask(s: &Hotness, user: &str, u: usize) -> PrefixKind {
    s.choose(&SelectInput {
        user,
        user_tokens: u,
        item_tokens: 100,
        reusable_item_tokens: 100,
        engine: None,
        pool_after_user: false,
    })
}

#[test]
fn short_users_always_go_item_prefix() {
    let s = Hotness::new(10, 1000, true);
    for _ in 0..5 {
        assert_eq!(ask(&s, "a", 99), PrefixKind::Item);
    }
}

#[test]
fn admits_while_room_then_only_hotter_users_displace_colder() {
    let s = Hotness::new(100, 400, true);
    assert_eq!(ask(&s, "a", 200), PrefixKind::User);
    assert_eq!(ask(&s, "a", 200), PrefixKind::User); // f_a = 2, cached
    assert_eq!(ask(&s, "b", 200), PrefixKind::User); // fits the free budget
    // Full; c (f=1) is not hotter than b (f=1): item prefix, b stays.
    assert_eq!(ask(&s, "c", 200), PrefixKind::Item);
    // c again (f=2) > min f_p (b: 1): b is dropped, c admitted.
    assert_eq!(ask(&s, "c", 200), PrefixKind::User);
    assert_eq!(ask(&s, "b", 200), PrefixKind::Item); // b: f=2, not > min (a 2, c 2)
    assert_eq!(ask(&s, "a", 200), PrefixKind::User); // still cached
    assert_eq!(ask(&s, "huge", 500), PrefixKind::Item); // can never fit
}

#[test]
fn with_repay_user_first_waits_for_users_that_come_back() {
    let s = Hotness::new(1000, 10_000_000, true).with_repay(true);
    // One-time users: nobody comes back, the pooled items win every time.
    for u in 0..20 {
        assert_eq!(ask_with(&s, &format!("once-{u}")), PrefixKind::Item);
    }
    // Regulars: ten users visit three times each; once returns are the rule, a new long
    // user is expected back and goes user-first.
    for _ in 0..3 {
        for u in 0..10 {
            ask_with(&s, &format!("regular-{u}"));
        }
    }
    assert_eq!(ask_with(&s, "newcomer"), PrefixKind::User);
    // Without repay a first visit goes user-first at once (room in the cache).
    let plain = Hotness::new(1000, 10_000_000, true);
    assert_eq!(ask_with(&plain, "z"), PrefixKind::User);
}

fn ask_with(s: &Hotness, user: &str) -> PrefixKind {
    s.choose(&SelectInput {
        user,
        user_tokens: 1000,
        item_tokens: 200,
        reusable_item_tokens: 200,
        engine: None,
        pool_after_user: false,
    })
}

#[test]
fn frequency_is_counted_over_the_window_only() {
    let s = Hotness::new(2, 200, true);
    assert_eq!(ask(&s, "a", 200), PrefixKind::User);
    assert_eq!(ask(&s, "x", 10), PrefixKind::Item);
    assert_eq!(ask(&s, "y", 10), PrefixKind::Item); // a has left the window: f_a = 0
    assert_eq!(ask(&s, "b", 200), PrefixKind::User); // f_b = 1 > f_a = 0
    assert_eq!(ask(&s, "a", 200), PrefixKind::Item); // f_a = 1, not > f_b = 1
}

/// A stand-in for the engine snapshot: the blocks it holds and their tokens.
struct Cache(std::collections::HashSet<u64>, usize);

impl super::super::CacheProbe for Cache {
    fn holds(&self, block: u64) -> bool {
        self.0.contains(&block)
    }
    fn cached_tokens(&self) -> usize {
        self.1
    }
}

fn ask_engine(
    s: &Hotness,
    user: &str,
    cached_user: usize,
    block: u64,
    cache: &Cache,
) -> PrefixKind {
    s.choose(&SelectInput {
        user,
        user_tokens: 200,
        item_tokens: 100,
        reusable_item_tokens: 50,
        engine: Some(EngineView {
            cached_user_tokens: cached_user,
            user_block: Some(block),
            cache,
        }),
        pool_after_user: false,
    })
}

#[test]
fn a_wholly_cached_user_goes_first_where_the_pool_serves_after_it() {
    let s = Hotness::new(100, 400, true);
    let cache = Cache([3].into(), 400);
    let ask = |cached_user_tokens, after| {
        s.choose(&SelectInput {
            user: "c",
            user_tokens: 40,
            item_tokens: 100,
            reusable_item_tokens: 100,
            engine: Some(EngineView {
                cached_user_tokens,
                user_block: Some(3),
                cache: &cache,
            }),
            pool_after_user: after,
        })
    };
    // Items-first reuses more than the 32 cached profile tokens ...
    assert_eq!(ask(32, false), PrefixKind::Item);
    // ... unless the pool serves the items after the (whole) profile: both are reused.
    assert_eq!(ask(32, true), PrefixKind::User);
}

#[test]
fn engine_view_decides_what_is_cached() {
    let s = Hotness::new(100, 400, true);
    let empty = Cache(Default::default(), 0);
    // Room in the engine: admitted.
    assert_eq!(ask_engine(&s, "a", 0, 1, &empty), PrefixKind::User);
    // Full engine holding a's block (f_a = 1): b (f = 1) is not hotter.
    let full_a = Cache([1].into(), 400);
    assert_eq!(ask_engine(&s, "b", 0, 2, &full_a), PrefixKind::Item);
    // The engine dropped a's block: nobody cached to compare with, b goes in.
    let full_other = Cache([9].into(), 400);
    assert_eq!(ask_engine(&s, "b", 0, 2, &full_other), PrefixKind::User);
    // A cached user prefix at least as long as the item side is reused.
    assert_eq!(ask_engine(&s, "c", 64, 3, &full_other), PrefixKind::User);
    // ... but a shorter cached run loses to the items.
    assert_eq!(ask_engine(&s, "c", 32, 3, &full_other), PrefixKind::Item);
    // Without admission every long-enough user goes first.
    let open = Hotness::new(100, 400, false);
    assert_eq!(ask_engine(&open, "a", 0, 1, &full_a), PrefixKind::User);
    assert_eq!(ask_engine(&open, "b", 0, 2, &full_a), PrefixKind::User);
}
