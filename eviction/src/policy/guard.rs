//! LARU's guard against bad predictions: a shadow LRU run beside the real cache, and a switch
//! to plain LRU while the real cache misses clearly more than the shadow would.
//!
//! LCR Algorithm 1 bounds the damage of wrong predictions by halving λ after
//! prediction-induced misses, but only within a phase: λ is 1 again at every phase start, so
//! under persistently wrong predictions every phase begins by trusting them again. Measured on
//! the Mooncake conversation trace with adversarial predictions (oracle, noise 1.0) that keeps
//! 0.80× LRU's hit ratio at 5% capacity. The guard compares outcomes instead of counting
//! suspect misses: over each window of accesses, the real cache's misses against those of an
//! LRU of the same capacity fed the same accesses (the shadow). When the real cache missed
//! more than `(1 + MARGIN)` times the shadow plus `SLACK`, predictions are distrusted for the
//! next windows and every victim is the LRU one; each failed trial doubles the distrusted
//! stretch (up to [`MAX_BACKOFF`] windows), so steadily wrong predictions cost a shrinking
//! share of the time. The backoff also sets λ at each phase start (1 / backoff instead of
//! LCR's 1): a trial after repeated losses lets predictions choose only among the oldest
//! leaves, which bounds what one bad trial can evict. Predictions that never lose a window
//! keep λ = 1 and LCR's behaviour. (This is the "follow the better of two algorithms"
//! combiner of the learning-augmented caching literature, with LRU as the robust one.)
//! Measured (docs/eviction.md): LARU with the oracle at noise 1.0 keeps 0.97/0.98/0.98/0.98×
//! LRU at 2/5/10/25% capacity on the Mooncake trace (≥ 0.98× on the generated conversation,
//! adversarial and GR traces), and equals OPT at noise 0 as before.
//!
//! The guard also tells LARU when the cache is *ahead* of the shadow ([`Guard::ahead`]); LCR's
//! λ then ignores prediction-induced misses (see there why).
//!
//! The shadow is a flat LRU over blocks (a prefix cache evicts leaves only; for requests that
//! touch a prefix root to leaf, the oldest block is a leaf or on a leaf's path, so the two
//! nearly agree) and costs about two hash-map operations and a queue push per access: the
//! shadow's recency order is a queue of (stamp, block) in which a re-access leaves the old
//! entry behind as stale (its stamp is no longer the block's), skipped when it reaches the
//! front, instead of an ordered map updated on every access.

use std::collections::VecDeque;

use crate::BlockId;
use crate::hash::FastMap;

/// Relative excess of real over shadow misses that counts as losing.
pub const MARGIN: f64 = 0.02;
/// Absolute excess tolerated per window (noise on short windows).
pub const SLACK: u64 = 4;
/// Most windows one distrusted stretch lasts.
pub const MAX_BACKOFF: u64 = 1024;

/// What [`MARGIN`] is a share of (`laru:guard_margin=`).
///
/// `hits` (the default): the shadow's hits, the quantity the guard's bound is stated in (a
/// share of LRU's hit ratio); 0.967x or better there with every window and span measured
/// (docs/eviction.md). `misses`: the shadow's misses (the default before 2026-12-06). Where LRU
/// hits little (Mooncake at 2%: 7.9% of accesses), 2% of the misses is ~23% of the hits, so
/// predictions that lose a fifth of LRU's hits never trip the guard, and adversarial ones kept
/// 0.93x LRU with 16,384-access windows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Margin {
    Misses,
    #[default]
    Hits,
}

/// Whether `real` misses lost or won against `shadow` misses over `n` accesses judged in
/// `windows` windows: the excess against [`MARGIN`] of the shadow's misses or hits, plus
/// [`SLACK`] per window.
fn verdict(real: u64, shadow: u64, n: u64, windows: u64, margin: Margin) -> (bool, bool) {
    let base = match margin {
        Margin::Misses => shadow,
        Margin::Hits => n.saturating_sub(shadow),
    };
    let tolerance = MARGIN * base as f64 + (SLACK * windows.max(1)) as f64;
    let (real, shadow) = (real as f64, shadow as f64);
    (real > shadow + tolerance, real < shadow - tolerance)
}

#[derive(Debug)]
pub struct Guard {
    capacity: usize,
    window: u64,
    stamp: u64,
    last: FastMap<BlockId, u64>,
    /// (stamp, block), oldest first; an entry is live while `last[block]` is its stamp.
    order: VecDeque<(u64, BlockId)>,
    seen: u64,
    real_misses: u64,
    shadow_misses: u64,
    /// Windows left in the current distrusted stretch.
    distrusted_for: u64,
    backoff: u64,
    /// Stretches started (counter for stats).
    pub trips: u64,
    /// Windows in which trusting predictions clearly beat the shadow.
    pub wins: u64,
    /// The last judged window's misses (real, shadow), for [`Self::ahead`].
    prev: (u64, u64),
    /// Windows judged together: the trusted windows since the last trip, at most `span`.
    span: usize,
    history: VecDeque<(u64, u64)>,
    margin: Margin,
}

impl Guard {
    /// A guard for a cache of `capacity` blocks, judging every `window` accesses.
    pub fn new(capacity: usize, window: u64) -> Self {
        Self {
            capacity: capacity.max(1),
            window: window.max(1),
            stamp: 0,
            last: FastMap::default(),
            order: VecDeque::new(),
            seen: 0,
            real_misses: 0,
            shadow_misses: 0,
            distrusted_for: 0,
            backoff: 1,
            trips: 0,
            wins: 0,
            prev: (0, 0),
            span: 1,
            history: VecDeque::new(),
            margin: Margin::default(),
        }
    }

    /// What the margin is a share of ([`Margin`]).
    pub fn with_margin(mut self, margin: Margin) -> Self {
        self.margin = margin;
        self
    }

    /// The margin's base ([`Self::with_margin`]).
    pub fn margin(&self) -> Margin {
        self.margin
    }

    /// Judges the sum of the last `span` trusted windows instead of one: a window is short
    /// next to the reuse distances a good order pays off over, and one lost by noise trips
    /// (and, with the backoff only growing, for ever longer stretches). Consistently wrong
    /// predictions lose every window, so the sum shows a loss from the first one on.
    pub fn with_span(mut self, span: usize) -> Self {
        self.span = span.max(1);
        self
    }

    /// Whether predictions may choose victims now.
    pub fn trusted(&self) -> bool {
        self.distrusted_for == 0
    }

    /// Whether predictions are trusted and the cache missed less than the shadow over the
    /// last judged window and the one in progress. LARU then does not count
    /// prediction-induced misses against λ: a good but imperfect predictor makes some (it
    /// evicts a block that does come back), and LCR's rule, which counts only those costs and
    /// never the misses the predictions saved, shrank λ to LRU while FPB with the same
    /// LightGBM predictions missed 11% less than LRU (GR trace, Beauty, 5%).
    pub fn ahead(&self) -> bool {
        self.trusted() && self.real_misses + self.prev.0 < self.shadow_misses + self.prev.1
    }

    /// λ at a phase start: 1 until a trial was lost, then 1 / (the current backoff), so a
    /// trial after repeated losses lets predictions choose among the oldest few leaves only.
    pub fn start_lambda(&self) -> f64 {
        1.0 / self.backoff as f64
    }

    /// One access: `missed` says whether the real cache had to insert the block.
    pub fn access(&mut self, block: BlockId, missed: bool) {
        self.stamp += 1;
        if self.last.insert(block, self.stamp).is_none() {
            self.shadow_misses += 1;
            // Live entries: every block in `last` but the one just inserted.
            if self.last.len() > self.capacity {
                self.evict_oldest();
            }
        }
        self.order.push_back((self.stamp, block));
        // Stale entries are dropped at the front; a block re-accessed while others age keeps
        // them in the middle, so compact when they outnumber the live ones (amortised O(1)).
        if self.order.len() > 2 * self.last.len() + 64 {
            let last = &self.last;
            self.order.retain(|(s, b)| last.get(b) == Some(s));
        }
        self.real_misses += missed as u64;
        self.seen += 1;
        if self.seen >= self.window {
            self.judge();
        }
    }

    /// Drops the least recently used live block of the shadow (the block just inserted has
    /// no entry yet, so it is never the victim).
    fn evict_oldest(&mut self) {
        while let Some((s, b)) = self.order.pop_front() {
            if self.last.get(&b) == Some(&s) {
                self.last.remove(&b);
                return;
            }
        }
    }

    fn judge(&mut self) {
        if self.distrusted_for == 0 {
            self.history
                .push_back((self.real_misses, self.shadow_misses));
            if self.history.len() > self.span {
                self.history.pop_front();
            }
        }
        let (r, s) = self
            .history
            .iter()
            .fold((0, 0), |(r, s), &(a, b)| (r + a, s + b));
        let windows = self.history.len().max(1) as u64;
        let (lost, won) = verdict(r, s, self.window * windows, windows, self.margin);
        if self.distrusted_for > 0 {
            self.distrusted_for -= 1;
        } else if lost {
            self.distrusted_for = self.backoff;
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            self.trips += 1;
            self.history.clear();
        } else if won {
            // Counted for stats only. Letting wins shrink the backoff was tried: adversarial
            // predictions win an occasional window (the shadow is a flat LRU, not the prefix
            // cache's), trust came back and each new trial cost a window of bad evictions
            // (0.93x LRU at 10% capacity instead of 0.96x).
            self.wins += 1;
        }
        self.prev = (self.real_misses, self.shadow_misses);
        self.seen = 0;
        self.real_misses = 0;
        self.shadow_misses = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losing_windows_distrust_with_growing_stretches_and_a_smaller_start_lambda() {
        let mut g = Guard::new(4, 10);
        // The shadow hits a 2-block loop; the real cache "misses" every time.
        let lose = |g: &mut Guard| {
            for i in 0..10 {
                g.access(i % 2, true);
            }
        };
        lose(&mut g);
        assert!(!g.trusted());
        assert_eq!(g.trips, 1);
        lose(&mut g); // the one distrusted window passes
        assert!(g.trusted());
        lose(&mut g); // a second trial loses: twice as long
        assert_eq!((g.trips, g.distrusted_for), (2, 2));
        lose(&mut g);
        lose(&mut g);
        assert!(g.trusted());
        assert_eq!(
            g.start_lambda(),
            0.25,
            "two losses: phases start at lambda 1/4"
        );
        for i in 0..10 {
            g.access(i % 2, false);
        }
        assert!(g.trusted(), "a window without loss keeps trusting");
        assert_eq!(g.backoff, 4, "and does not shrink the next stretch");
        assert_eq!(
            Guard::new(4, 10).start_lambda(),
            1.0,
            "LCR's lambda until a loss"
        );
    }

    #[test]
    fn a_hits_margin_trips_where_lru_hits_little() {
        // 2,048 accesses, LRU hits 160 (7.8%), the cache 120: a quarter of the hits lost.
        let (real, shadow) = (2048 - 120, 2048 - 160);
        assert_eq!(
            verdict(real, shadow, 2048, 1, Margin::Misses),
            (false, false)
        );
        assert_eq!(verdict(real, shadow, 2048, 1, Margin::Hits), (true, false));
        // Where LRU hits most, the two margins nearly agree.
        assert_eq!(verdict(900, 800, 2048, 1, Margin::Misses), (true, false));
        assert_eq!(verdict(900, 800, 2048, 1, Margin::Hits), (true, false));
        assert_eq!(verdict(700, 800, 2048, 1, Margin::Hits), (false, true));
        assert_eq!(verdict(800, 800, 2048, 1, Margin::Hits), (false, false));
    }

    #[test]
    fn shadow_misses_like_a_reference_lru() {
        // The queue with stale entries against an ordered map updated on every access.
        for capacity in [1, 3, 17] {
            let mut g = Guard::new(capacity, u64::MAX);
            let mut last = std::collections::HashMap::new();
            let mut order = std::collections::BTreeMap::new();
            let mut misses = 0;
            let mut x = 7u64;
            for stamp in 0..20_000u64 {
                x = crate::hash::mix64(x);
                // Skewed ids so blocks are often re-accessed while others age.
                let block = (x % 64) * (x >> 60) % 50;
                match last.insert(block, stamp) {
                    Some(old) => {
                        order.remove(&old);
                    }
                    None => {
                        misses += 1;
                        if order.len() >= capacity {
                            if let Some((_, v)) = order.pop_first() {
                                last.remove(&v);
                            }
                        }
                    }
                }
                order.insert(stamp, block);
                g.access(block, false);
                assert_eq!(
                    g.shadow_misses, misses,
                    "capacity {capacity}, access {stamp}"
                );
            }
            assert!(
                g.order.len() <= 2 * g.last.len() + 65,
                "stale entries compacted"
            );
        }
    }

    #[test]
    fn ahead_while_the_cache_misses_less_than_the_shadow() {
        let mut g = Guard::new(4, 10);
        assert!(!g.ahead(), "no misses yet: not ahead");
        for b in 100..110 {
            g.access(b, false); // the shadow misses fresh blocks, the cache "hit"
        }
        assert!(g.ahead());
        for i in 0..5 {
            g.access(i % 2, true);
        }
        // Last window 0 vs 10 misses, this one so far 5 vs 2: 5 < 12, ahead over the two.
        assert!(g.ahead() && g.trusted());
        for i in 0..5 {
            g.access(i % 2, true);
        }
        assert!(!g.trusted() && !g.ahead(), "the window was lost: 10 vs 2");
    }
}
