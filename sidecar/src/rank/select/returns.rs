//! How likely a user is to come back, learnt online from the hotness window: of the users who
//! reached `f` visits within the window, the share who made visit `f + 1` in it. BAT §5.3 takes
//! a user's recent frequency f_u as its near-future frequency; this measures that relation on
//! the traffic itself instead of assuming it (a stream of mostly one-time users makes f_u = 1
//! a poor predictor of another visit, a handful of regulars a good one).
//!
//! Used where going user-first costs something now: with an item KV pool, an uncached user's
//! user-first prompt gives up the pooled item tokens τ_i it would have reused item-first, and
//! pays back τ_u − τ_i on each later visit that finds its prefix cached. With return share r,
//! the expected later visits are r / (1 − r) (each visit returns again with about the same
//! share), so user-first pays iff r / (1 − r) · (τ_u − τ_i) > τ_i.

/// Visit counts above this share one bucket.
const BUCKETS: usize = 8;

#[derive(Debug, Default, Clone)]
pub struct Returns {
    /// Per visit count f (bucketed): users who reached f visits, and who then made another.
    reached: [u64; BUCKETS + 1],
    returned: [u64; BUCKETS + 1],
}

fn bucket(f: u64) -> usize {
    (f as usize).min(BUCKETS)
}

impl Returns {
    /// A user just made visit number `f` (within the window, this one included).
    pub fn visit(&mut self, f: u64) {
        if f == 0 {
            return;
        }
        if f >= 2 {
            self.returned[bucket(f - 1)] += 1;
        }
        self.reached[bucket(f)] += 1;
    }

    /// Share of users with `f` visits who came back: the bucket's own share, shrunk towards
    /// the share over all visit counts while the bucket has few users; no returns assumed
    /// before any is seen (item-first, which saves the pooled items now, is the safe default).
    pub fn share(&self, f: u64) -> f64 {
        const PRIOR: f64 = 4.0;
        let all = self.returned.iter().sum::<u64>() as f64
            / (self.reached.iter().sum::<u64>() + 1) as f64;
        let b = bucket(f.max(1));
        (self.returned[b] as f64 + PRIOR * all) / (self.reached[b] as f64 + PRIOR)
    }

    /// Whether an uncached user with `f` visits, `user` profile tokens and `items` reusable
    /// item tokens saves more over its expected later visits by going user-first now.
    pub fn repays(&self, f: u64, user: usize, items: usize) -> bool {
        if items == 0 {
            return true; // nothing given up now
        }
        if user <= items {
            return false;
        }
        let r = self.share(f).min(0.999);
        r / (1.0 - r) * (user - items) as f64 > items as f64
    }
}

#[cfg(test)]
#[path = "returns_tests.rs"]
mod tests;
