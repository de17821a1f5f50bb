//! LARU, learning-augmented LRU (LCR Algorithm 1).
//!
//! Phases: at a phase start every resident block is *old*; the phase ends when
//! every old block was requested or evicted. On a miss for `x`: if a
//! prediction evicted `x` earlier in this phase, OPT would not have (an
//! unrequested old block was still there, and it is further), so the
//! prediction was wrong: evict by plain LRU once and count it; every
//! `lambda_min_misses` such misses halve λ. Otherwise take the l = max(⌊λk⌋, 1)
//! oldest evictable leaves and evict the one predicted furthest. λ = 1 again
//! at each phase start. With l = 1 this is LRU; with λ = 1 it is FPB.
//!
//! With the guard (default, [`super::guard`]): λ at a phase start is 1 / the
//! guard's backoff, victims are LRU's while the guard distrusts predictions,
//! and prediction-induced misses do not halve λ while the cache is ahead of
//! the guard's shadow LRU; with `fallback=behind` they do not evict by LRU then
//! either ([`Fallback`]).
//!
//! With `base=dead-first` ([`super::DeadFirst`]) the robust order LARU leans on is
//! dead-first's instead of LRU's: a request-unique block (a GR candidate run or instruction,
//! dead on arrival) is evicted first, oldest first, with no prediction asked; predictions
//! and the phase rules above choose only once no dead leaf is left. On traces without entity
//! context nothing is dead and this is plain LARU.
//!
//! Cost: O(log k) when l covers every evictable leaf (the usual case, since a
//! prefix tree has far fewer leaves than blocks), else O(l) to scan the l
//! oldest leaves.

use super::dead_first::DeadFirst;
use super::guard::Guard;
use super::scored::Scored;
use super::{AccessEvent, EvictCtx, EvictionPolicy, LambdaOver, PolicyStats};
use crate::BlockId;
use crate::hash::FastSet;
use crate::index::{LeafEvent, RadixIndex};
use crate::predict::Predictor;

pub struct Laru {
    scored: Scored,
    k: usize,
    lambda: f64,
    /// Prediction-induced misses per halving of λ.
    misses_per_halving: u64,
    misses_since_halving: u64,
    /// Old blocks not yet requested or evicted in this phase.
    old: FastSet<BlockId>,
    /// Blocks a prediction (not LRU) evicted in this phase.
    evicted_by_prediction: FastSet<BlockId>,
    phases: u64,
    prediction_induced_misses: u64,
    lru_fallbacks: u64,
    /// The shadow-LRU guard ([`super::guard`]); None: LCR Algorithm 1 alone.
    guard: Option<Guard>,
    /// l = λ·k (LCR) instead of λ·(evictable leaves).
    over_cache: bool,
    /// `base=dead-first`: dead blocks go first, before any prediction.
    dead: Option<DeadFirst>,
    fallback: Fallback,
}

/// When a miss on a block a prediction evicted in this phase makes LARU evict by LRU once.
///
/// Algorithm 1 does it on every such miss, to bound what wrong predictions cost within a
/// phase. On conversations that come back hundreds of requests later it costs what the
/// predictions gain: the predictions evict conversations just used, some of those return
/// early, and each such miss evicts the LRU leaf, the conversation idle longest, which is the
/// one closest to its usual return. `behind` keeps the rule only while the guard does not see
/// the cache ahead of its shadow LRU; while it is ahead, those misses are paid for (as they
/// already are for λ, [`Guard::ahead`]) and predictions choose. The guard is what bounds
/// wrong predictions then: without it `behind` is `always`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    #[default]
    Always,
    Behind,
}

/// Accesses per guard window.
pub const GUARD_WINDOW: u64 = 2048;
/// Windows the guard judges together.
pub const GUARD_SPAN: usize = 1;

impl Laru {
    /// `k` is the capacity; `lambda_min_misses` defaults to max(k/32, 1)
    /// (LCR §5.1: for large caches one wrong guess should not halve λ).
    pub fn new(predictor: Box<dyn Predictor>, k: usize, lambda_min_misses: Option<u64>) -> Self {
        Self {
            scored: Scored::new(predictor),
            k,
            lambda: 1.0,
            misses_per_halving: lambda_min_misses.unwrap_or(k as u64 / 32).max(1),
            misses_since_halving: 0,
            old: FastSet::default(),
            evicted_by_prediction: FastSet::default(),
            phases: 0,
            prediction_induced_misses: 0,
            lru_fallbacks: 0,
            guard: Some(Guard::new(k, GUARD_WINDOW).with_span(GUARD_SPAN)),
            over_cache: false,
            dead: None,
            fallback: Fallback::Always,
        }
    }

    /// When a prediction-induced miss evicts by LRU ([`Fallback`]).
    pub fn fallback(mut self, fallback: Fallback) -> Self {
        self.fallback = fallback;
        self
    }

    /// Dead-first (`true`) or LRU as the order predictions refine.
    pub fn dead_first_base(mut self, on: bool) -> Self {
        self.dead = on.then(DeadFirst::default);
        self
    }

    /// What the guard's margin is a share of ([`super::guard::Margin`]).
    pub fn guard_margin(mut self, margin: super::guard::Margin) -> Self {
        self.guard = self.guard.take().map(|g| g.with_margin(margin));
        self
    }

    /// Judges the guard every `window` accesses, on the sum of the last `span` windows (a new
    /// guard, keeping the old one's margin).
    pub fn guard_window(mut self, window: u64, span: usize) -> Self {
        self.guard = self.guard.take().map(|g| {
            Guard::new(self.k, window)
                .with_span(span)
                .with_margin(g.margin())
        });
        self
    }

    /// What λ is a fraction of when it sets the candidate count.
    pub fn lambda_over(mut self, over: LambdaOver) -> Self {
        self.over_cache = over == LambdaOver::Cache;
        self
    }

    /// With or without the shadow-LRU guard.
    pub fn guarded(mut self, on: bool) -> Self {
        if !on {
            self.guard = None;
        }
        self
    }

    fn maybe_new_phase(&mut self, idx: &RadixIndex) {
        if !self.old.is_empty() || idx.is_empty() {
            return;
        }
        // O(k), amortised O(1): the phase lasts at least as many events.
        self.old.extend(idx.blocks());
        self.evicted_by_prediction.clear();
        self.lambda = self.guard.as_ref().map_or(1.0, Guard::start_lambda);
        self.misses_since_halving = 0;
        self.phases += 1;
    }

    /// The choice at `lambda` ([`Pick`]), refreshing predictions only.
    fn pick(&mut self, idx: &RadixIndex, now: u64, lambda: f64) -> Pick {
        let n = idx.evictable_len();
        let l = candidates(lambda, if self.over_cache { self.k } else { n });
        if l == 1 || self.guard.as_ref().is_some_and(|g| !g.trusted()) {
            return Pick::Lru;
        }
        if !self.scored.refresh(idx, now) {
            return Pick::NoModel;
        }
        let victim = if l >= n {
            self.scored.furthest(idx, now)
        } else {
            self.scored.furthest_of(idx, now, l)
        };
        // None: no leaf has a prediction yet (async mode), so LRU's choice.
        victim.map_or(Pick::Lru, |victim| Pick::Predicted { victim, l })
    }

    /// λ as the next decision will see it: a phase about to start resets it.
    fn next_lambda(&self, idx: &RadixIndex) -> f64 {
        if self.old.is_empty() && !idx.is_empty() {
            self.guard.as_ref().map_or(1.0, Guard::start_lambda)
        } else {
            self.lambda
        }
    }
}

/// How LARU chooses among the evictable leaves at λ (after the phase and the
/// prediction-induced-miss rule), shared by deciding and by ranking ahead.
enum Pick {
    /// l = 1, or the guard distrusts predictions: plain LRU.
    Lru,
    /// The predictor has no model yet: LRU, counted as a fallback when deciding.
    NoModel,
    /// The furthest predicted among the `l` oldest leaves.
    Predicted { victim: BlockId, l: usize },
}

/// l = max(⌊λ·n⌋, 1) over the n evictable leaves. In a flat cache n = k,
/// as in the paper; in a prefix tree only leaves are candidates, and
/// scaling by k would keep l ≥ n (predictions choosing among all leaves)
/// until λ < n/k, which a tree with few leaves reaches only after many
/// halvings.
fn candidates(lambda: f64, n: usize) -> usize {
    ((lambda * n as f64).floor() as usize).max(1)
}

impl EvictionPolicy for Laru {
    fn name(&self) -> &'static str {
        "laru"
    }

    fn on_access(&mut self, idx: &RadixIndex, ev: &AccessEvent) {
        self.scored.on_access(idx, ev);
        if let Some(d) = &mut self.dead {
            d.on_access(idx, ev);
        }
        if let Some(g) = &mut self.guard {
            g.access(ev.block, ev.ctx.pos >= ev.ctx.hit_len);
        }
        self.old.remove(&ev.block);
        self.maybe_new_phase(idx);
    }

    fn on_leaf(&mut self, idx: &RadixIndex, ev: LeafEvent) {
        self.scored.on_leaf(ev);
        if let Some(d) = &mut self.dead {
            d.on_leaf(idx, ev);
        }
    }

    fn on_remove(&mut self, block: BlockId) {
        self.scored.on_remove(block);
        if let Some(d) = &mut self.dead {
            d.on_remove(block);
        }
        self.old.remove(&block);
    }

    fn select_victim(&mut self, idx: &RadixIndex, ctx: &EvictCtx) -> Option<BlockId> {
        self.maybe_new_phase(idx);
        let lru = idx.lru_first()?;
        // The base's own first choice: no prediction evicted it, so no phase rule applies.
        if let Some(dead) = self.dead.as_ref().and_then(DeadFirst::first_dead) {
            return Some(dead);
        }
        if let Some(x) = ctx.incoming {
            if self.evicted_by_prediction.remove(&x) {
                self.prediction_induced_misses += 1;
                // While the guard sees predictions ahead of LRU, their misses are already paid
                // for: they do not shrink λ (`Guard::ahead`).
                let paid = self.guard.as_ref().is_some_and(Guard::ahead);
                self.misses_since_halving += u64::from(!paid);
                if self.misses_since_halving >= self.misses_per_halving {
                    // Floor at 1/k: l is 1 from there on anyway.
                    self.lambda = (self.lambda / 2.0).max(1.0 / self.k.max(1) as f64);
                    self.misses_since_halving = 0;
                }
                if !(paid && self.fallback == Fallback::Behind) {
                    return Some(lru);
                }
            }
        }
        match self.pick(idx, ctx.now, self.lambda) {
            Pick::Lru => Some(lru),
            Pick::NoModel => {
                self.lru_fallbacks += 1;
                Some(lru)
            }
            Pick::Predicted { victim, .. } => {
                if victim != lru {
                    self.evicted_by_prediction.insert(victim);
                }
                Some(victim)
            }
        }
    }

    /// What `select_victim` would take first, then the window's order
    /// ([`Scored::ranked`]); LRU's order where it would fall back to LRU. A miss on a block a
    /// prediction evicted also falls back to LRU, but which request misses is not known here.
    fn next_leaves(&mut self, idx: &RadixIndex, limit: usize, now: u64) -> Option<Vec<BlockId>> {
        let rest = match self.pick(idx, now, self.next_lambda(idx)) {
            Pick::Lru | Pick::NoModel => idx.lru_iter().take(limit).collect(),
            Pick::Predicted { victim, l } => self.scored.ranked(idx, now, l, limit, Some(victim)),
        };
        let Some(d) = &self.dead else {
            return Some(rest);
        };
        let live = rest.into_iter().filter(|b| !d.is_dead_leaf(*b));
        Some(d.dead_leaves().chain(live).take(limit).collect())
    }

    fn stats(&self) -> PolicyStats {
        PolicyStats {
            lru_fallbacks: self.lru_fallbacks,
            lambda: Some(self.lambda),
            phases: self.phases,
            prediction_induced_misses: self.prediction_induced_misses,
            guard_trips: self.guard.as_ref().map_or(0, |g| g.trips),
            predictor: Some(self.scored.stats()),
        }
    }
}
