//! How likely a user is to come back, learnt online from the hotness window. BAT §5.3 takes a
//! user's recent frequency f_u as its near-future frequency; this measures that relation on
//! the traffic itself instead of assuming it (a stream of mostly one-time users makes f_u = 1
//! a poor predictor of another visit, a handful of regulars a good one).
//!
//! Used where going user-first costs something now: with an item KV pool, an uncached user's
//! user-first prompt gives up the pooled item tokens τ_i it would have reused item-first, and
//! pays back τ_u − τ_i on each later visit that finds its prefix cached. With r the chance of
//! another visit within the window, the expected later visits are r / (1 − r) (each visit
//! returns again with about the same chance), so user-first pays iff
//! r / (1 − r) · (τ_u − τ_i) > τ_i.
//!
//! r is a return *rate* per request, counted per visit count f, turned into the chance of a
//! return within the window: r = 1 − exp(−λ_f · window), λ_f = returns / exposure, where
//! exposure is the requests each user spent at f before its next visit, before leaving the
//! window without one, or so far. Counting users still at f as if they had not come back
//! (returns over users who reached f) reads every user of a young stream as gone: four
//! regulars who have each visited k times show a share of about ½ at k however surely they
//! return, and user-first never paid for them while the peers' plain user-first caching
//! reused every profile. Exposure counts only the time each user has had to come back.

use std::collections::HashMap;

/// Visit counts above this share one bucket.
const BUCKETS: usize = 8;
/// The overall rate's weight in a bucket's, in returns (a bucket with few shrinks to it).
const PRIOR: f64 = 4.0;

#[derive(Debug, Default, Clone)]
pub struct Returns {
    /// Requests seen (the clock the rates are per).
    now: u64,
    /// Users in the window: the bucket of their last visit and when it was.
    last: HashMap<String, (usize, u64)>,
    /// Per bucket: returns seen, exposure of users no longer at it (requests), and the users
    /// still at it with the sum of the times they got there.
    returned: [u64; BUCKETS + 1],
    closed: [u64; BUCKETS + 1],
    open: [u64; BUCKETS + 1],
    open_since: [u64; BUCKETS + 1],
}

fn bucket(f: u64) -> usize {
    (f as usize).min(BUCKETS)
}

impl Returns {
    /// `user` just made visit number `f` (within the window, this one included).
    pub fn visit(&mut self, user: &str, f: u64) {
        self.now += 1;
        if f == 0 {
            return;
        }
        if let Some((b, since)) = self.last.remove(user) {
            self.close(b, since, true);
        }
        let b = bucket(f);
        self.open[b] += 1;
        self.open_since[b] += self.now;
        self.last.insert(user.to_string(), (b, self.now));
    }

    /// `user`'s last visit left the window with no other after it: gone, as far as the
    /// window can tell.
    pub fn leave(&mut self, user: &str) {
        if let Some((b, since)) = self.last.remove(user) {
            self.close(b, since, false);
        }
    }

    fn close(&mut self, b: usize, since: u64, returned: bool) {
        self.open[b] -= 1;
        self.open_since[b] -= since;
        self.closed[b] += self.now - since;
        self.returned[b] += u64::from(returned);
    }

    /// Requests users spent at bucket `b` (so far, for those still there).
    fn exposure(&self, b: usize) -> f64 {
        (self.closed[b] + self.open[b] * self.now - self.open_since[b]) as f64
    }

    /// Returns per request of users with `f` visits: the bucket's own rate, shrunk towards
    /// the rate over all visit counts while the bucket has few returns; 0 before any return
    /// is seen (item-first, which saves the pooled items now, is the safe default).
    pub fn rate(&self, f: u64) -> f64 {
        let events: u64 = self.returned.iter().sum();
        let exposure: f64 = (0..=BUCKETS).map(|b| self.exposure(b)).sum();
        if events == 0 || exposure <= 0.0 {
            return 0.0;
        }
        let all = events as f64 / exposure;
        let b = bucket(f.max(1));
        (self.returned[b] as f64 + PRIOR) / (self.exposure(b) + PRIOR / all)
    }

    /// The chance that a user with `f` visits comes back within `window` requests.
    pub fn share(&self, f: u64, window: usize) -> f64 {
        1.0 - (-self.rate(f) * window as f64).exp()
    }

    /// Whether an uncached user with `f` visits, `user` profile tokens and `items` reusable
    /// item tokens saves more over its expected later visits (within `window` requests) by
    /// going user-first now.
    /// `after`: the pool also serves a user-first prompt after its cached profile, so a
    /// later visit gains the whole profile (τ_u), not τ_u − τ_i.
    pub fn repays(&self, f: u64, window: usize, user: usize, items: usize, after: bool) -> bool {
        if items == 0 {
            return true; // nothing given up now
        }
        let gain = match after {
            true => user,
            false => user.saturating_sub(items),
        };
        let r = self.share(f, window).min(0.999);
        gain > 0 && r / (1.0 - r) * gain as f64 > items as f64
    }
}

#[cfg(test)]
#[path = "returns_tests.rs"]
mod tests;
