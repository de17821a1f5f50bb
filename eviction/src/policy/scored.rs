//! Predicted next-access times for the evictable leaves, shared by the
//! learned policies (FPB, HF, LARU).
//!
//! A leaf's prediction is made once per access, lazily, when a policy needs a
//! decision (sync mode), in one batch for every leaf that went stale, so the
//! predictor runs at most about once per access. A new model version makes
//! every cached prediction stale. `by_pred` orders leaves by prediction so the
//! furthest among *all* leaves is O(log k).
//!
//! Expiry: a learned prediction is a point estimate made at the last access.
//! Once its time has passed without the access, ranking by it would call the
//! block "needed soon" forever, and an idle block would never leave (FPB then
//! keeps dead blocks and evicts fresh ones). For predictors that say
//! [`Predictor::expires`], an overdue block is scored `now + age · r`, where
//! r = age / predicted gap is how late it is: a block of a conversation that
//! usually comes back within 50 requests and has been idle for 500 is likely
//! dead. Overdue leaves are looked for among the oldest `OVERDUE_SCAN`
//! leaves at the head of the LRU order. A predictor that reads the idle age instead (the
//! `age` feature set) says when each prediction is due again
//! ([`Predictor::repredict_at`]); such leaves go stale then and are predicted anew.

use std::collections::{BTreeSet, BinaryHeap, VecDeque};

use super::AccessEvent;
use crate::BlockId;
use crate::hash::{FastMap, FastSet};
use crate::index::{LeafEvent, RadixIndex};
use crate::predict::{Predictor, PredictorStats};

/// f64 with a total order (NaN never stored: the predictor rejects it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ord64(pub f64);
impl Eq for Ord64 {}
impl PartialOrd for Ord64 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ord64 {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

type Key = (Ord64, u32, BlockId);

pub struct Scored {
    predictor: Box<dyn Predictor>,
    keys: FastMap<BlockId, Key>,
    by_pred: BTreeSet<Key>,
    stale: FastSet<BlockId>,
    version: u64,
    expires: bool,
    batch: Vec<(BlockId, u64)>,
    out: Vec<f64>,
    /// Predictions due again (the predictor reads idle age): (time, block), and each
    /// block's entry.
    due: BTreeSet<(u64, BlockId)>,
    due_of: FastMap<BlockId, u64>,
}

impl Scored {
    pub fn new(predictor: Box<dyn Predictor>) -> Self {
        Self {
            expires: predictor.expires(),
            predictor,
            keys: FastMap::default(),
            by_pred: BTreeSet::new(),
            stale: FastSet::default(),
            version: 0,
            batch: Vec::new(),
            out: Vec::new(),
            due: BTreeSet::new(),
            due_of: FastMap::default(),
        }
    }

    pub fn stats(&self) -> PredictorStats {
        self.predictor.stats()
    }

    fn unlist(&mut self, block: BlockId) {
        if let Some(k) = self.keys.remove(&block) {
            self.by_pred.remove(&k);
        }
        if let Some(at) = self.due_of.remove(&block) {
            self.due.remove(&(at, block));
        }
        self.stale.remove(&block);
    }

    pub fn on_access(&mut self, idx: &RadixIndex, ev: &AccessEvent) {
        self.predictor.observe(ev);
        if self.keys.contains_key(&ev.block) || self.stale.contains(&ev.block) {
            self.unlist(ev.block);
            if idx.is_evictable_leaf(ev.block) {
                self.stale.insert(ev.block);
            }
        }
    }

    pub fn on_leaf(&mut self, ev: LeafEvent) {
        self.unlist(ev.block);
        if ev.evictable {
            self.stale.insert(ev.block);
        }
    }

    pub fn on_remove(&mut self, block: BlockId) {
        self.unlist(block);
        self.predictor.forget(block);
    }

    /// Brings every evictable leaf's prediction up to date. False when the
    /// predictor has no usable model (the caller falls back to LRU).
    pub fn refresh(&mut self, idx: &RadixIndex, now: u64) -> bool {
        self.predictor.tick(now);
        let Some(version) = self.predictor.model_version() else {
            return false;
        };
        if version != self.version {
            self.version = version;
            let all: Vec<BlockId> = self.keys.keys().copied().collect();
            for b in all {
                self.unlist(b);
                self.stale.insert(b);
            }
        }
        while let Some(&(at, b)) = self.due.first() {
            if at > now {
                break;
            }
            self.unlist(b);
            self.stale.insert(b);
        }
        if self.stale.is_empty() {
            return true;
        }
        self.batch.clear();
        // Sorted so the predictor sees the same order on every run.
        let mut stale: Vec<BlockId> = self.stale.drain().collect();
        stale.sort_unstable();
        for b in stale {
            if let Some(last) = idx.last_access(b) {
                self.batch.push((b, last));
            }
        }
        if !self.predictor.predict(&self.batch, &mut self.out) {
            self.stale.extend(self.batch.iter().map(|x| x.0));
            return false;
        }
        for (&(b, last), &p) in self.batch.iter().zip(&self.out) {
            if p.is_nan() {
                // Not predicted yet (async mode): ask again next time.
                self.stale.insert(b);
                continue;
            }
            let key = (Ord64(p), idx.depth(b).unwrap_or(0), b);
            self.by_pred.insert(key);
            self.keys.insert(b, key);
            if let Some(at) = self.predictor.repredict_at(last, now) {
                self.due.insert((at, b));
                self.due_of.insert(b, at);
            }
        }
        true
    }

    /// The ranking score of a leaf with prediction `pred` and last access `last` (see module
    /// doc). `last` comes with the candidate from the LRU order ([`RadixIndex::lru_entries`]),
    /// not from a lookup: on the request path this runs for each of up to `l` candidates.
    #[inline]
    fn score(&self, pred: f64, last: u64, now: u64) -> f64 {
        if self.expires && pred < now as f64 {
            let last = last as f64;
            let age = now as f64 - last;
            // Lateness: idle `age` when `pred - last` was expected; a block
            // late by a factor r is scored as if needed r·age from now.
            now as f64 + age * age / (pred - last).max(1.0)
        } else {
            pred
        }
    }

    /// Furthest predicted among all evictable leaves (after `refresh`).
    pub fn furthest(&self, idx: &RadixIndex, now: u64) -> Option<BlockId> {
        let top = self.by_pred.last()?;
        if !self.expires {
            return Some(top.2);
        }
        let now_f = now as f64;
        // Overdue leaves score by age: the oldest ones are at the LRU head.
        let overdue = idx
            .lru_entries()
            .take(OVERDUE_SCAN)
            .filter_map(|(b, last)| Some((self.keys.get(&b).filter(|k| k.0.0 < now_f)?, last)))
            .map(|(k, last)| (Ord64(self.score(k.0.0, last, now)), k.2))
            .max();
        match overdue {
            Some((s, b)) if top.0.0 < now_f || s.0 > top.0.0 => Some(b),
            None if top.0.0 < now_f => idx.lru_first(),
            _ => Some(top.2),
        }
    }

    /// Furthest predicted among the `l` least recently used evictable leaves (after
    /// `refresh`). Ties go to the deeper, then the larger id, as before.
    pub fn furthest_of(&self, idx: &RadixIndex, now: u64, l: usize) -> Option<BlockId> {
        let mut best: Option<(Ord64, u32, BlockId)> = None;
        for (b, last) in idx.lru_entries().take(l) {
            let Some(k) = self.keys.get(&b) else {
                continue;
            };
            let cand = (Ord64(self.score(k.0.0, last, now)), k.1, k.2);
            // `Iterator::max` keeps the last of equal maxima; keys are unique (the id is in
            // them), so `>=` and `>` agree.
            if best.is_none_or(|x| cand >= x) {
                best = Some(cand);
            }
        }
        best.map(|k| k.2)
    }

    /// The evictable leaves in the order repeated choices among the `l` least recently used
    /// would take them (after `refresh`), at most `limit`, evicting nothing: a window of the
    /// `l` oldest leaves, from which the furthest predicted leaves first and the next oldest
    /// joins. A leaf without a prediction leaves when no predicted leaf is in the window
    /// (the policies fall back to LRU then). `first`, the policy's own next victim, leads:
    /// the window scores every leaf by [`Self::score`], while [`Self::furthest`] looks for
    /// overdue leaves only near the LRU head, so the two can disagree on the top.
    pub fn ranked(
        &self,
        idx: &RadixIndex,
        now: u64,
        l: usize,
        limit: usize,
        first: Option<BlockId>,
    ) -> Vec<BlockId> {
        let mut out: Vec<BlockId> = first.into_iter().take(limit).collect();
        let mut entries = idx.lru_entries().filter(|(b, _)| Some(*b) != first);
        let mut window: BinaryHeap<Key> = BinaryHeap::new();
        let mut unscored: VecDeque<BlockId> = VecDeque::new();
        while out.len() < limit {
            while window.len() + unscored.len() < l.max(1) {
                let Some((b, last)) = entries.next() else {
                    break;
                };
                match self.keys.get(&b) {
                    Some(k) => window.push((Ord64(self.score(k.0.0, last, now)), k.1, k.2)),
                    None => unscored.push_back(b),
                }
            }
            match window.pop().map(|k| k.2).or_else(|| unscored.pop_front()) {
                Some(b) => out.push(b),
                None => break,
            }
        }
        out
    }
}

/// How far into the LRU order to look for the oldest overdue leaf.
const OVERDUE_SCAN: usize = 32;
