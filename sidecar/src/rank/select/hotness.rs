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
//! least the reusable item side (the larger hit now), or wholly cached where the item pool
//! serves after it (both sides reused). Without one, a model of the engine:
//! prefixes admitted into a `user_cache_tokens` budget, the coldest (lowest f, ties by id) with
//! f_p < f_u dropped to make room.
//!
//! `repay: true` (with an item KV pool) adds a test before admission: going user-first gives up
//! the pooled item tokens now, so an uncached user goes user-first only when its expected
//! later visits repay them ([`super::returns`]: return rates learnt from the window).
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
                        self.returns.leave(&old);
                    }
                }
            }
        }
        let f = self.freq.get(user).copied().unwrap_or(0);
        self.returns.visit(user, f);
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
            || state.returns.repays(
                f_u,
                self.window,
                input.user_tokens,
                input.reusable_item_tokens,
                input.pool_after_user,
            )
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
            // Whole blocks of the profile are all the engine can hold of it.
            let whole = engine.cached_user_tokens + 32 > input.user_tokens;
            return if engine.cached_user_tokens >= reusable_items
                || (input.pool_after_user && whole)
            {
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
#[path = "hotness_tests.rs"]
mod tests;
