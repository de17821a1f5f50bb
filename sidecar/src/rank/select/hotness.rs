//! BAT's hotness-aware prefix selection (ASPLOS'26, §5.3).
//!
//! Each request adds its user to a sliding window of the last `window` requests; f_u is the
//! user's count in it. A request goes user-as-prefix iff τ_u ≥ τ_i (the user side is at least as
//! long as the reusable item side, so caching it saves more than the items would) **and** the
//! user's prefix is, or can be admitted into, the user-prefix cache: it is already there, it
//! fits in the free budget, or f_u > min f_p over the cached prefixes. Otherwise the request goes
//! item-as-prefix, which leaves the hot users' cached prefixes alone.
//!
//! Which prefixes are cached: with an [`EngineView`] (recache follows the engine's KV events)
//! the engine's own cache — a user counts as cached while the first block of its user-first
//! prompt is; a user whose prefix is cached goes user-first whenever that cached run is at
//! least the reusable item side (the larger hit now). Without one, a model of the engine:
//! prefixes admitted into a `user_cache_tokens` budget, the coldest (lowest f, ties by id) with
//! f_p < f_u dropped to make room.
//!
//! `repay: true` (with an item KV pool) adds a test before admission: going user-first gives up
//! the pooled item tokens now, so an uncached user goes user-first only when its expected
//! later visits repay them ([`super::returns`]: return shares learnt from the window).
//!
//! `admission: false` skips the f_u test (every long-enough user goes user-first). That is the
//! right setting when going item-first does not keep a cold user's tokens out of the cache: a
//! plain prefix cache (vLLM's) stores the item-first prompt just the same, so declining
//! admission spares nothing and only loses that user's next visit (measured in the README).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::{EngineView, PrefixKind, PrefixSelector, SelectInput};

pub struct Hotness {
    window: usize,
    capacity: u64,
    admission: bool,
    repay: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    recent: VecDeque<String>,
    freq: HashMap<String, u64>,
    /// User prefixes taken as cached, with their token counts (the model, no engine view).
    cached: HashMap<String, u64>,
    used: u64,
    /// Users sent user-first, by the content id of their prompt's first block (engine view).
    sent: HashMap<String, u64>,
    returns: super::returns::Returns,
}

impl State {
    fn record(&mut self, user: &str, window: usize) -> u64 {
        self.recent.push_back(user.to_string());
        *self.freq.entry(user.to_string()).or_default() += 1;
        while self.recent.len() > window {
            if let Some(old) = self.recent.pop_front() {
                if let Some(n) = self.freq.get_mut(&old) {
                    *n -= 1;
                    if *n == 0 {
                        self.freq.remove(&old);
                    }
                }
            }
        }
        let f = self.freq.get(user).copied().unwrap_or(0);
        self.returns.visit(f);
        f
    }

    fn f(&self, user: &str) -> u64 {
        self.freq.get(user).copied().unwrap_or(0)
    }

    /// Admits `user` (τ tokens) if the rule allows; true when its prefix is now cached.
    fn admit(&mut self, user: &str, tokens: u64, f_u: u64, capacity: u64) -> bool {
        if let Some(old) = self.cached.insert(user.to_string(), tokens) {
            self.used = self.used - old + tokens;
            return true;
        }
        self.cached.remove(user);
        if tokens > capacity {
            return false;
        }
        let mut victims: Vec<(u64, &String, u64)> = self
            .cached
            .iter()
            .map(|(p, t)| (self.f(p), p, *t))
            .filter(|(f, _, _)| *f < f_u)
            .collect();
        victims.sort();
        let mut free = capacity - self.used.min(capacity);
        let mut evict = Vec::new();
        for (_, p, t) in victims {
            if free >= tokens {
                break;
            }
            free += t;
            evict.push(p.clone());
        }
        if free < tokens {
            return false;
        }
        for p in evict {
            if let Some(t) = self.cached.remove(&p) {
                self.used -= t;
            }
        }
        self.cached.insert(user.to_string(), tokens);
        self.used += tokens;
        true
    }
}

impl Hotness {
    pub fn new(window: usize, user_cache_tokens: u64, admission: bool) -> Self {
        Self {
            window: window.max(1),
            capacity: user_cache_tokens,
            admission,
            repay: false,
            state: Mutex::new(State::default()),
        }
    }

    /// With `repay`, an uncached user goes user-first only when its expected later visits
    /// repay the reusable item tokens it gives up now (an item KV pool).
    pub fn with_repay(self, repay: bool) -> Self {
        Self { repay, ..self }
    }

    fn repaid(&self, state: &State, input: &SelectInput<'_>, f_u: u64) -> bool {
        !self.repay
            || state
                .returns
                .repays(f_u, input.user_tokens, input.reusable_item_tokens)
    }

    /// The rule against the engine's own cache.
    fn choose_engine(
        &self,
        state: &mut State,
        input: &SelectInput<'_>,
        engine: &EngineView<'_>,
        f_u: u64,
    ) -> PrefixKind {
        let reusable_items = input.reusable_item_tokens;
        let user_first = |state: &mut State| {
            if let Some(b) = engine.user_block {
                state.sent.insert(input.user.to_string(), b);
            }
            PrefixKind::User
        };
        if engine.cached_user_tokens > 0 {
            return if engine.cached_user_tokens >= reusable_items {
                user_first(state)
            } else {
                PrefixKind::Item
            };
        }
        if input.user_tokens < reusable_items {
            return PrefixKind::Item;
        }
        if !self.admission {
            return user_first(state);
        }
        if !self.repaid(state, input, f_u) {
            return PrefixKind::Item;
        }
        // Users whose prefix the engine still holds; forget the others.
        state.sent.retain(|_, b| engine.cache.holds(*b));
        let room = engine.cache.cached_tokens() as u64 + input.user_tokens as u64 <= self.capacity;
        let min_cached = state
            .sent
            .keys()
            .filter(|p| p.as_str() != input.user)
            .map(|p| state.f(p))
            .min();
        match min_cached {
            Some(min) if !room && f_u <= min => PrefixKind::Item,
            _ => user_first(state),
        }
    }
}

impl PrefixSelector for Hotness {
    fn name(&self) -> &'static str {
        "bat"
    }

    fn choose(&self, input: &SelectInput<'_>) -> PrefixKind {
        // A poisoned lock only means another request panicked mid-update; the counts are still
        // usable for a heuristic, so keep serving.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let f_u = state.record(input.user, self.window);
        if let Some(engine) = &input.engine {
            return self.choose_engine(&mut state, input, engine, f_u);
        }
        // τ_i counts what the item side can actually give back (see `rank::item_prefix`).
        if input.user_tokens < input.reusable_item_tokens {
            return PrefixKind::Item;
        }
        if !self.admission {
            return PrefixKind::User;
        }
        if !self.repaid(&state, input, f_u) {
            return PrefixKind::Item;
        }
        if state.admit(input.user, input.user_tokens as u64, f_u, self.capacity) {
            PrefixKind::User
        } else {
            PrefixKind::Item
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(s: &Hotness, user: &str, u: usize) -> PrefixKind {
        s.choose(&SelectInput {
            user,
            user_tokens: u,
            item_tokens: 100,
            reusable_item_tokens: 100,
            engine: None,
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
        })
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
}
