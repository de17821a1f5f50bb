//! The reuse-distance predictor (`--predictor reuse`): the next access of a block read off
//! the distribution of reuse distances the trace has shown so far, given how long the block
//! has been idle. No model, no training: a histogram of observed reuse distances (log-spaced
//! bins, halved every [`HALF_LIFE`] accesses so it follows the traffic) and a count of
//! accesses.
//!
//! Why idle age and not the access's own columns: in multi-turn traffic (LCR's Online-QA,
//! a conversation's next turn ~266 requests later, spread little) a block's next access is
//! mostly a function of how long it has waited. One just used will not be needed for a
//! while, one idle for ~250 requests is about to be, one idle far past the usual gap
//! belongs to a finished conversation. LRU ranks the first above the second; OPT the other
//! way round. A prediction made at access time cannot see the wait, so predictions are remade
//! as the age crosses each bin ([`Predictor::repredict_at`]).
//!
//! Counts are kept per block class, the class of the block's last access: its entity kind
//! where the trace says (a GR user profile, a pooled item, a run of candidates, the rest; one
//! kind otherwise) and how often the block was used (once, 2-3, 4-7, 8+ times; LHD's classes
//! by hits). So a GR request's candidate runs, which are never reused, predict "never"
//! (dead-first's order falls out), profiles are ranked by their own returns, and a shared
//! system prompt (used every few requests) does not blur a conversation's return (used once
//! per turn). A (kind, uses) class is used once it has seen [`FINE_MIN`] accesses, its kind's
//! counts before that.
//!
//! For a block idle `a`: `M` = reuses seen at distances beyond `a`, `N` = accesses never
//! followed by a reuse (so far); `p = M / (M + N)` is the chance it is reused at all and `r`
//! the mean remaining wait of those reuses. The prediction is `now + r / p`: a reuse
//! expected in `r`, discounted by the chance it comes (an expected wait per hit, as LHD's
//! hit density ranks). No reuse beyond `a` seen: never.

use std::sync::Arc;

use super::{Predictor, PredictorStats};
use crate::BlockId;
use crate::future::FutureIndex;
use crate::hash::FastMap;
use crate::policy::AccessEvent;
use crate::trace::SegmentKind;

/// Bins per doubling of distance.
const STEPS: f64 = 4.0;
/// Bins: distances up to 2^(BINS/STEPS) = 2^32.
const BINS: usize = 128;
/// Accesses between halvings of every count.
pub const HALF_LIFE: u64 = 1 << 20;
/// Reuses seen before predictions are made (LRU before that).
const WARM: f64 = 64.0;
/// Blocks whose last access is kept; past it the map starts over (bounded memory).
const MAX_BLOCKS: usize = 1 << 22;
/// Stands in for "never again" (as the oracle's).
const NEVER: f64 = super::oracle::NEVER;
/// Block kinds: no entity context, then one per [`SegmentKind`].
const KINDS: usize = 5;
/// Use-count buckets within a kind: used once, 2-3, 4-7, 8 or more times.
const USES: usize = 4;
/// Accesses a (kind, uses) class needs before its own counts replace its kind's.
const FINE_MIN: f64 = 1024.0;

fn kind(ev: &AccessEvent) -> usize {
    match ev.ctx.entity.map(|e| e.kind) {
        None => 0,
        Some(SegmentKind::User) => 1,
        Some(SegmentKind::Item) => 2,
        Some(SegmentKind::Items) => 3,
        Some(SegmentKind::Other) => 4,
    }
}

/// One class's counts.
#[derive(Clone)]
struct Hist {
    reuses: [f64; BINS],
    /// Sum of the distances in each bin (their mean is the bin's representative).
    sums: [f64; BINS],
    accesses: f64,
    /// Suffix sums of `reuses` and `sums`, remade when counts changed.
    tail: Vec<(f64, f64)>,
    dirty: bool,
}

impl Hist {
    fn new() -> Self {
        Self {
            reuses: [0.0; BINS],
            sums: [0.0; BINS],
            accesses: 0.0,
            tail: vec![(0.0, 0.0); BINS + 1],
            dirty: true,
        }
    }

    fn halve(&mut self) {
        self.reuses.iter_mut().for_each(|c| *c *= 0.5);
        self.sums.iter_mut().for_each(|c| *c *= 0.5);
        self.accesses *= 0.5;
        self.dirty = true;
    }

    fn refresh(&mut self) {
        if !self.dirty {
            return;
        }
        let mut acc = (0.0, 0.0);
        for b in (0..BINS).rev() {
            acc.0 += self.reuses[b];
            acc.1 += self.sums[b];
            self.tail[b] = acc;
        }
        self.dirty = false;
    }

    /// Reuses seen beyond `age` (this bin counted when its mean lies past `age`): their
    /// count and the sum of their distances.
    fn beyond(&self, age: u64) -> (f64, f64) {
        let b = bin(age);
        let (mut m, mut s) = self.tail[b + 1];
        let (rb, sb) = (self.reuses[b], self.sums[b]);
        if rb > 0.0 && sb / rb > age as f64 {
            m += rb;
            s += sb;
        }
        (m, s)
    }

    /// Predicted wait for a block idle `age` (see the module doc); None: never.
    fn wait(&self, age: u64) -> Option<f64> {
        let p = self.chance(age)?;
        let (m, s) = self.beyond(age);
        Some((s / m - age as f64).max(1.0) / p)
    }

    /// The chance a block idle `age` is used again, from the counts (None: no reuse this
    /// late seen).
    fn chance(&self, age: u64) -> Option<f64> {
        let (m, _) = self.beyond(age);
        let never = (self.accesses - self.tail[0].0).max(0.0);
        (m > 0.0).then(|| m / (m + never))
    }

    /// The remaining wait at quantile `u` of the reuses seen beyond `age` (None: none seen):
    /// a phantom return drawn as a real one would be.
    fn wait_at_quantile(&self, age: u64, u: f64) -> Option<f64> {
        let (m, _) = self.beyond(age);
        if m <= 0.0 {
            return None;
        }
        let first = bin(age);
        let (mut acc, target) = (0.0, u.clamp(0.0, 1.0) * m);
        for b in first..BINS {
            let (rb, sb) = (self.reuses[b], self.sums[b]);
            if rb <= 0.0 || (b == first && sb / rb <= age as f64) {
                continue;
            }
            acc += rb;
            if acc >= target {
                return Some((sb / rb - age as f64).max(1.0));
            }
        }
        Some(1.0)
    }

    /// The wait of a block known to be used again: the mean remaining wait alone (due now
    /// when no reuse this late was seen).
    fn wait_if_reused(&self, age: u64) -> f64 {
        let (m, s) = self.beyond(age);
        if m <= 0.0 {
            1.0
        } else {
            (s / m - age as f64).max(1.0)
        }
    }
}

/// The (kind, uses bucket) histogram's index.
fn fine(kind: usize, uses: u32) -> usize {
    let bucket = (uses.max(1).ilog2() as usize).min(USES - 1);
    KINDS + kind * USES + bucket
}

fn bin(d: u64) -> usize {
    (((d as f64 + 1.0).log2() * STEPS) as usize).min(BINS - 1)
}

/// The smallest distance in bin `b + 1` (where a block of bin `b` moves on).
fn next_edge(b: usize) -> u64 {
    (2f64.powf((b + 1) as f64 / STEPS) - 1.0).ceil() as u64
}

/// What a bound is told of the trace's future.
enum Told {
    Nothing,
    /// `--predictor reuse-oracle`: whether a block is used again (never when); such a block
    /// is predicted as if its reuse were certain.
    Whether(Arc<FutureIndex>),
    /// `--predictor when-oracle`: when a block is used again; a block that is not gets a
    /// phantom return drawn from the reuses seen (one draw per request, from this seed), so
    /// the rule cannot tell which will not return.
    When(Arc<FutureIndex>, u64),
}

pub struct ReuseHist {
    /// What the simulator's bounds are told of the trace's future (nothing when serving).
    told: Told,
    /// Each block's last access, kind and times used.
    last: FastMap<BlockId, (u64, u8, u32)>,
    /// One per kind, then one per (kind, uses bucket).
    hists: Vec<Hist>,
    reuses: f64,
    observed: u64,
    now: u64,
    stats: PredictorStats,
}

impl Default for ReuseHist {
    fn default() -> Self {
        Self::new()
    }
}

impl ReuseHist {
    pub fn new() -> Self {
        Self {
            told: Told::Nothing,
            last: FastMap::default(),
            hists: vec![Hist::new(); KINDS * (1 + USES)],
            reuses: 0.0,
            observed: 0,
            now: 0,
            stats: PredictorStats::default(),
        }
    }

    /// The simulator's bound for age-based rules: told whether each block is used again.
    pub fn knowing_whether(mut self, future: Arc<FutureIndex>) -> Self {
        self.told = Told::Whether(future);
        self
    }

    /// The simulator's bound for rules that cannot see whether a block returns (one coin
    /// per conversation turn in Online-QA): told when each block that is used again comes
    /// back, and for one that is not a phantom time drawn as a return would be. Ranks by
    /// that wait over the chance of a reuse at the block's age, as `wait` does.
    pub fn knowing_when(mut self, future: Arc<FutureIndex>, seed: u64) -> Self {
        self.told = Told::When(future, seed);
        self
    }

    fn warm(&self) -> bool {
        self.reuses >= WARM
    }

    /// The histogram a block of `kind` used `uses` times is ranked by: its (kind, uses)
    /// class once that has seen enough, else its kind's.
    fn hist_for(&self, kind: usize, uses: u32) -> &Hist {
        let fine = &self.hists[fine(kind, uses)];
        if fine.accesses >= FINE_MIN {
            fine
        } else {
            &self.hists[kind]
        }
    }
}

impl Predictor for ReuseHist {
    fn kind(&self) -> &'static str {
        "reuse"
    }

    fn observe(&mut self, ev: &AccessEvent) {
        self.stats.observed += 1;
        self.now = self.now.max(ev.time);
        if self.last.len() >= MAX_BLOCKS && !self.last.contains_key(&ev.block) {
            self.last.clear();
        }
        let k = kind(ev);
        // One map lookup per access: this runs for every block of every request.
        let slot = self.last.entry(ev.block).or_insert((ev.time, k as u8, 0));
        let prev = (slot.2 > 0).then_some(*slot);
        // A second touch within one request is not a reuse.
        if prev.is_some_and(|(t, _, _)| t == ev.time) {
            return;
        }
        let uses = slot.2.saturating_add(1);
        *slot = (ev.time, k as u8, uses);
        if let Some((t, pk, pu)) = prev {
            // Counted under the class the block had when it was last used: what a
            // prediction for it knows.
            let d = ev.time.saturating_sub(t);
            for i in [usize::from(pk), fine(usize::from(pk), pu)] {
                let h = &mut self.hists[i];
                h.reuses[bin(d)] += 1.0;
                h.sums[bin(d)] += d as f64;
                h.dirty = true;
            }
            self.reuses += 1.0;
        }
        for i in [k, fine(k, uses)] {
            self.hists[i].accesses += 1.0;
            self.hists[i].dirty = true;
        }
        self.observed += 1;
        if self.observed % HALF_LIFE == 0 {
            self.hists.iter_mut().for_each(Hist::halve);
            self.reuses *= 0.5;
        }
    }

    fn tick(&mut self, now: u64) {
        self.now = self.now.max(now);
    }

    fn repredict_at(&self, last: u64, now: u64) -> Option<u64> {
        Some(last + next_edge(bin(now.saturating_sub(last))))
    }

    fn model_version(&self) -> Option<u64> {
        self.warm().then_some(1)
    }

    fn predict(&mut self, blocks: &[(BlockId, u64)], out: &mut Vec<f64>) -> bool {
        out.clear();
        if !self.warm() {
            self.stats.fallbacks += 1;
            return false;
        }
        self.hists.iter_mut().for_each(Hist::refresh);
        let now = self.now;
        for &(b, last) in blocks {
            let age = now.saturating_sub(last);
            let (k, uses) = self
                .last
                .get(&b)
                .map_or((0, 1), |&(_, k, u)| (usize::from(k), u));
            let h = self.hist_for(k, uses);
            let w = match &self.told {
                Told::Whether(f) => f.next_after(b, last).map(|_| h.wait_if_reused(age)),
                Told::When(f, seed) => h.chance(age).and_then(|p| {
                    let rem = match f.next_after(b, last) {
                        Some(t) => Some((t.saturating_sub(now) as f64).max(1.0)),
                        // One draw for every block the request touched at `last`.
                        None => h.wait_at_quantile(age, crate::hash::unit(*seed, last, 0)),
                    };
                    rem.map(|r| r / p)
                }),
                Told::Nothing => h.wait(age),
            };
            out.push(w.map_or(NEVER, |w| now as f64 + w));
        }
        self.stats.predict_calls += 1;
        self.stats.predict_rows += blocks.len() as u64;
        true
    }

    fn stats(&self) -> PredictorStats {
        self.stats.clone()
    }
}

#[cfg(test)]
#[path = "reuse_tests.rs"]
mod tests;
