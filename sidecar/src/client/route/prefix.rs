//! `prefix`: send a request where most of its prompt is already cached, traded against load.
//!
//! **Cost model.** For each healthy replica `r`, the work the request adds there is the prompt
//! tokens `r` does not hold: `cost(r) = tokens − cached(r)`. The cheapest replica wins; ties go
//! to the one with fewer outstanding requests, then fewer recent ones. Queue depth overrides
//! the cache only past a gap (as SGLang's router balances): when the busiest and the idlest
//! healthy replica differ by more than `queue_gap` outstanding requests, the idlest wins.
//! (A first version charged each outstanding request at the mean prompt length; on the
//! testbed that traded affinity away at every transient queue and delivered fewer hits than
//! `least-loaded`: docs/routing.md.)
//!
//! **Bounded load** (consistent hashing with bounded loads, Mirrokni et al. 2018): a replica
//! whose share of recent requests (an exponentially decayed count over about
//! [`WINDOW`] requests) would exceed `1 + balance` times the mean is skipped while another is
//! available, so one hot prefix cannot pull all traffic to one replica.
//!
//! **What is cached where**: for a token-id prompt on a replica whose KV-event mirror is
//! `exact` ([`crate::client::mirror`]), the mirror (plus what was sent there in the last
//! [`PENDING`], still being computed); otherwise recache's own record of what it sent where
//! ([`super::sent`]: approximate mode, no KV events needed, bounded by `blocks` keys per
//! replica and a TTL). Text prompts always use the record: the mirror knows token ids only.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::sent::Sent;
use super::{ReplicaChoice, RouteHint};
use crate::client::mirror;
use crate::client::replica::{Replica, can_take};

/// Requests over which the recent share is counted (decay 1 − 1/WINDOW per decision).
pub const WINDOW: f64 = 1000.0;

/// With an exact mirror, how long a prompt sent to a replica counts as cached there before
/// its blocks show up in the replica's KV events (they are stored once computed).
pub const PENDING: Duration = Duration::from_secs(10);

/// The rule's parameters (`--routing prefix:blocks=N:ttl_s=S:balance=B:queue_gap=G`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefixParams {
    /// Keys remembered per replica (one key: 32 tokens, or 128 bytes of text).
    pub blocks: usize,
    /// A key not sent for this long is taken to be evicted.
    pub ttl: Duration,
    /// Allowed excess of a replica's recent share over the mean (0.3: up to 1.3×).
    pub balance: f64,
    /// Outstanding-request gap past which the least loaded replica wins regardless of cache.
    pub queue_gap: usize,
}

#[derive(Debug)]
pub struct Prefix {
    params: PrefixParams,
    state: Mutex<State>,
    clock: Instant,
}

#[derive(Debug, Default)]
struct State {
    sent: Vec<Sent>,
    /// Decayed request counts per replica.
    recent: Vec<f64>,
}

impl Prefix {
    pub fn new(params: PrefixParams) -> Self {
        Self {
            params,
            state: Mutex::new(State::default()),
            clock: Instant::now(),
        }
    }
}

/// Leading keys of the prompt replica `r` holds: from its KV-event mirror when that is
/// `exact` and the keys are token blocks (plus what was sent there in the last [`PENDING`]:
/// blocks being computed are not in the events yet), else from the record of what was sent.
fn cached_keys(r: &Replica, sent: &Sent, hint: &RouteHint<'_>, now: u64, ttl: u64) -> usize {
    let keys = &hint.keys.keys;
    match r.mirror.exact().filter(|_| hint.keys.token_ids) {
        Some(view) => mirror::held_prefix(&view, keys).max(sent.matched(
            keys,
            now,
            ttl.min(PENDING.as_millis() as u64),
        )),
        None => sent.matched(keys, now, ttl),
    }
}

impl ReplicaChoice for Prefix {
    fn forget(&self, index: usize) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sent) = s.sent.get_mut(index) {
            sent.clear();
        }
    }

    fn wants_keys(&self) -> bool {
        true
    }

    fn choose(
        &self,
        replicas: &[Arc<Replica>],
        tried: &[usize],
        hint: &RouteHint<'_>,
    ) -> Option<usize> {
        self.choose_with(replicas, tried, hint, |_| 0, |_, _| 0.0, |_| 0)
    }
}

impl Prefix {
    /// The choice with a placement preference: among replicas of equal cost, more
    /// `affinity` wins before load does (the `gr` rule's home replicas; 0 for plain `prefix`),
    /// on a replica with an exact KV-event mirror only while its recent share is at most the
    /// mean.
    /// `supplied(i, held)`: prompt tokens replica `i` supplies beyond its prefix cache, given
    /// the `held` leading keys it caches (the `gr` rule's item pools; 0 for plain `prefix`),
    /// taken off its cost.
    /// `dearer(i)`: among replicas equal in cost, placement and load, fewer wins (the `gr`
    /// rule's items read from the store; 0 for plain `prefix`).
    pub(super) fn choose_with(
        &self,
        replicas: &[Arc<Replica>],
        tried: &[usize],
        hint: &RouteHint<'_>,
        affinity: impl Fn(usize) -> usize,
        supplied: impl Fn(usize, usize) -> f64,
        dearer: impl Fn(usize) -> usize,
    ) -> Option<usize> {
        let n = replicas.len();
        let now = self.clock.elapsed().as_millis() as u64;
        let ttl = self.params.ttl.as_millis() as u64;
        // A poisoned lock only means another request panicked mid-update; the record is
        // still a usable approximation.
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.sent.len() != n {
            s.sent.resize_with(n, Sent::default);
            s.recent.resize(n, 0.0);
        }
        let candidates: Vec<usize> = (0..n).filter(|&i| can_take(replicas, tried, i)).collect();
        if candidates.is_empty() {
            return None;
        }
        let tokens = hint.keys.tokens as f64;
        let load = |i: usize| replicas[i].in_flight();
        let (lo, hi) = candidates.iter().fold((usize::MAX, 0), |(lo, hi), &i| {
            (lo.min(load(i)), hi.max(load(i)))
        });
        let imbalanced = hi - lo > self.params.queue_gap;
        let total: f64 = candidates.iter().map(|&i| s.recent[i]).sum();
        // Rounded up, as in the paper: with few requests counted, a bound below 2 would
        // refuse a replica its second request.
        let limit = ((1.0 + self.params.balance) * (total + 1.0) / candidates.len() as f64).ceil();
        let per_key = hint.keys.tokens_per_key() as f64;
        // A placement preference (the `gr` rule's homes) exists so that the next request, from
        // this recache or another one, finds the prompt where it went. Where the replica's KV
        // events are mirrored exactly, every instance sees what it holds anyway, so there the
        // preference yields to balance: it counts only while the replica's recent share is
        // at most the mean. (Homes are a hash: on the testbed 17 of 24 users, 81 of 96
        // requests, were homed on one replica, which then ran at the load bound all run.)
        let mean = total / candidates.len() as f64;
        let placed = |i: usize| {
            replicas[i].mirror.state() != mirror::MirrorState::Exact || s.recent[i] <= mean
        };
        // Key: cost, placement, load, then what makes equal supply dearer (`dearer`: cold
        // items), recent share, index.
        type Key = (f64, std::cmp::Reverse<usize>, usize, usize, f64, usize);
        let mut best: Option<Key> = None;
        // Per candidate (replica, cost, over the bound), for the debug trace of the decision.
        let trace = tracing::enabled!(target: "recache::route", tracing::Level::DEBUG);
        let mut seen: Vec<(usize, f64, bool)> = Vec::new();
        for pass in 0..2 {
            for &i in &candidates {
                // First pass: only replicas within the load bound.
                if pass == 0 && s.recent[i] + 1.0 > limit {
                    continue;
                }
                let cost = if imbalanced {
                    0.0
                } else {
                    let cached = cached_keys(&replicas[i], &s.sent[i], hint, now, ttl);
                    let supply = supplied(i, cached);
                    (tokens - cached as f64 * per_key - supply).max(0.0)
                };
                let near = std::cmp::Reverse(if imbalanced || !placed(i) {
                    0
                } else {
                    affinity(i)
                });
                let key = (cost, near, load(i), dearer(i), s.recent[i], i);
                if trace {
                    seen.push((i, cost, s.recent[i] + 1.0 > limit));
                }
                if best
                    .is_none_or(|b| (key.0, key.1, key.2, key.3, key.4) < (b.0, b.1, b.2, b.3, b.4))
                {
                    best = Some(key);
                }
            }
            if best.is_some() {
                break;
            }
        }
        let (_, _, _, _, _, chosen) = best?;
        tracing::debug!(target: "recache::route", chosen, imbalanced, limit, recent = ?s.recent,
            candidates = ?seen, user = ?hint.gr.map(|g| (g.user, g.user_first)), "route decision");
        let decay = 1.0 - 1.0 / WINDOW;
        s.recent.iter_mut().for_each(|r| *r *= decay);
        s.recent[chosen] += 1.0;
        s.sent[chosen].touch(&hint.keys.keys, now, self.params.blocks);
        Some(chosen)
    }
}
