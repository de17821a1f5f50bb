//! BAT's hotness-aware prefix selection (ASPLOS'26, §5.3).
//!
//! Each request adds its user to a sliding window of the last `window` requests; f_u is the
//! user's count in it. A request goes user-as-prefix iff τ_u ≥ τ_i (the user side is at least as
//! long as the item side, so caching it saves more than the items would) **and** the user's
//! prefix is, or can be admitted into, the modelled user-prefix cache: it is already there, it
//! fits in the free budget, or f_u > min f_p over the cached prefixes — then the coldest cached
//! prefixes (lowest f, ties by id) with f_p < f_u are dropped until it fits. Otherwise the request
//! goes item-as-prefix, which leaves the hot users' cached prefixes alone.
//!
//! The cache is a model of what the engine keeps (a token budget), not the engine's state:
//! following its KV events is a later issue.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::{PrefixKind, PrefixSelector, SelectInput};

pub struct Hotness {
    window: usize,
    capacity: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    recent: VecDeque<String>,
    freq: HashMap<String, u64>,
    /// User prefixes taken as cached, with their token counts.
    cached: HashMap<String, u64>,
    used: u64,
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
        self.freq.get(user).copied().unwrap_or(0)
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
    pub fn new(window: usize, user_cache_tokens: u64) -> Self {
        Self {
            window: window.max(1),
            capacity: user_cache_tokens,
            state: Mutex::new(State::default()),
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
        // τ_i counts what the item side can actually give back (see `rank::item_prefix`).
        if input.user_tokens < input.reusable_item_tokens {
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
        })
    }

    #[test]
    fn short_users_always_go_item_prefix() {
        let s = Hotness::new(10, 1000);
        for _ in 0..5 {
            assert_eq!(ask(&s, "a", 99), PrefixKind::Item);
        }
    }

    #[test]
    fn admits_while_room_then_only_hotter_users_displace_colder() {
        let s = Hotness::new(100, 400);
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
    fn frequency_is_counted_over_the_window_only() {
        let s = Hotness::new(2, 200);
        assert_eq!(ask(&s, "a", 200), PrefixKind::User);
        assert_eq!(ask(&s, "x", 10), PrefixKind::Item);
        assert_eq!(ask(&s, "y", 10), PrefixKind::Item); // a has left the window: f_a = 0
        assert_eq!(ask(&s, "b", 200), PrefixKind::User); // f_b = 1 > f_a = 0
        assert_eq!(ask(&s, "a", 200), PrefixKind::Item); // f_a = 1, not > f_b = 1
    }
}
