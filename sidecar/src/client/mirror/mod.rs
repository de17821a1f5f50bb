//! What each replica caches, for the routing rules, and how far that can be trusted.
//!
//! With one `--kv-events` per `--upstream`, every replica gets its own mirror: a subscription
//! to that engine's KV events ([`feed`]) keeps a set of the content ids of its cached blocks
//! (the engine loop's ids, [`recache_hash::blocks`], which are also the route keys of token
//! prompts), published lock-free for the request path. A periodic canary ([`canary`]) checks
//! the mirror against what the engine reports. Each replica's mirror is in one state:
//!
//! - `exact`: events flow and the last canary agreed (or canaries are off): the `prefix` rule
//!   reads this mirror;
//! - `degraded`: events flow but the mirror is known to be wrong (a canary disagreed, events
//!   were lost and could not be replayed): the rule falls back to its own record of what it
//!   sent where, until a canary agrees again;
//! - `approximate`: no events (none configured, the publisher unreachable, a block size the
//!   route keys cannot name, or not verified yet): the rule uses its record.
//!
//! The state, its reason, the mirror's size and the canary outcomes are exported per replica
//! and shown in `/ready`'s detail.

pub mod canary;
pub mod feed;
mod metrics;
pub mod watch;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

use std::time::Duration;

use arc_swap::ArcSwap;
use recache_eviction::hash::FastSet;

use super::EngineClient;
use crate::shutdown::TaskGuard;

pub use self::metrics::{MirrorMetricVecs, MirrorMetrics};

/// Calls in a row on which the engine delivers no cached tokens while the mirror predicts
/// some before traffic alone raises the silent-0% warning (one canary is enough).
pub const SILENT_ZERO_CALLS: u32 = 3;

/// How far a replica's mirror can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum MirrorState {
    Approximate = 0,
    Exact = 1,
    Degraded = 2,
}

impl MirrorState {
    pub const ALL: [Self; 3] = [Self::Approximate, Self::Exact, Self::Degraded];

    pub fn name(self) -> &'static str {
        match self {
            Self::Approximate => "approximate",
            Self::Exact => "exact",
            Self::Degraded => "degraded",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Exact,
            2 => Self::Degraded,
            _ => Self::Approximate,
        }
    }
}

/// One replica's mirror: the published set of cached content ids and its state.
#[derive(Debug)]
pub struct ReplicaMirror {
    ids: ArcSwap<FastSet<u64>>,
    state: AtomicU8,
    why: Mutex<String>,
    /// Calls in a row with hits predicted and none delivered.
    zero_streak: AtomicU32,
    metrics: Option<MirrorMetrics>,
    /// The canary's fixed blocks: whether they were evicted while a canary waited.
    pub watch: watch::Watch,
}

impl Default for ReplicaMirror {
    fn default() -> Self {
        Self::new(None)
    }
}

impl ReplicaMirror {
    /// A mirror with no events yet (`approximate`).
    pub fn new(metrics: Option<MirrorMetrics>) -> Self {
        let m = Self {
            ids: ArcSwap::from_pointee(FastSet::default()),
            state: AtomicU8::new(MirrorState::Approximate as u8),
            why: Mutex::new("no --kv-events for this upstream".into()),
            zero_streak: AtomicU32::new(0),
            metrics,
            watch: watch::Watch::default(),
        };
        m.export(MirrorState::Approximate);
        m
    }

    pub fn state(&self) -> MirrorState {
        MirrorState::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// Why the mirror is in its state (for `/ready`).
    pub fn why(&self) -> String {
        self.why.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Moves to `state`, logging a change.
    pub fn set_state(&self, state: MirrorState, why: impl Into<String>, upstream: &str) {
        let why = why.into();
        let old = MirrorState::from_u8(self.state.swap(state as u8, Ordering::Relaxed));
        if old != state {
            if state == MirrorState::Exact {
                tracing::info!(upstream, why = %why, "routing mirror is exact");
            } else {
                tracing::warn!(upstream, state = state.name(), why = %why, "routing mirror not exact; routing by recache's own record");
            }
        }
        *self.why.lock().unwrap_or_else(|e| e.into_inner()) = why;
        self.export(state);
    }

    fn export(&self, state: MirrorState) {
        if let Some(m) = &self.metrics {
            for s in MirrorState::ALL {
                m.state(s).set(i64::from(s == state));
            }
        }
    }

    /// Records a call whose cached tokens were both predicted and reported by the engine.
    /// Returns whether the silent-0% condition holds now.
    pub fn observe(&self, predicted: u64, delivered: u64, upstream: &str) -> bool {
        if let Some(m) = &self.metrics {
            m.predicted.inc_by(predicted);
            m.delivered.inc_by(delivered);
        }
        if delivered > 0 {
            self.zero_streak.store(0, Ordering::Relaxed);
            self.set_silent_zero(false, upstream);
            return false;
        }
        if predicted == 0 || self.silent_zero() {
            return self.silent_zero();
        }
        let streak = self.zero_streak.fetch_add(1, Ordering::Relaxed) + 1;
        if streak >= SILENT_ZERO_CALLS {
            self.set_silent_zero(true, upstream);
        }
        self.silent_zero()
    }

    /// Raises or clears the silent-0% warning (metric and, when raised, an error log).
    pub fn set_silent_zero(&self, on: bool, upstream: &str) {
        let was = self.zero_streak.load(Ordering::Relaxed) == u32::MAX;
        if on && !was {
            self.zero_streak.store(u32::MAX, Ordering::Relaxed);
            tracing::error!(
                upstream,
                "the engine reports no cached tokens although its mirror predicts hits (silent 0% \
                 hit rate): is prefix caching on, and is a cache salt or another model in use?"
            );
        } else if !on && was {
            self.zero_streak.store(0, Ordering::Relaxed);
            tracing::info!(upstream, "the engine reports cached tokens again");
        }
        if let Some(m) = &self.metrics {
            m.silent_zero.set(i64::from(on));
        }
    }

    /// Whether the silent-0% warning is raised.
    pub fn silent_zero(&self) -> bool {
        self.zero_streak.load(Ordering::Relaxed) == u32::MAX
    }

    pub fn metrics(&self) -> Option<&MirrorMetrics> {
        self.metrics.as_ref()
    }

    /// Replaces the published set (the feed's thread only).
    pub fn publish(&self, ids: FastSet<u64>) {
        if let Some(m) = &self.metrics {
            m.blocks.set(ids.len() as i64);
        }
        self.ids.store(Arc::new(ids));
        self.watch.published();
    }

    /// The mirror's view when it is `exact`, else None (the rule then uses its own record).
    pub fn exact(&self) -> Option<arc_swap::Guard<Arc<FastSet<u64>>>> {
        (self.state() == MirrorState::Exact).then(|| self.ids.load())
    }

    /// Leading keys of a token prompt's chain the mirror holds, whatever the state (the
    /// canary's prediction).
    pub fn held_prefix(&self, keys: &[u64]) -> usize {
        held_prefix(&self.ids.load(), keys)
    }
}

/// Starts one feed per replica from `events` (same order as the replicas; none when empty)
/// and, every `canary` period, the canaries. The guards stop them.
pub fn start(
    client: &Arc<EngineClient>,
    events: &[String],
    canary: Option<Duration>,
) -> Vec<TaskGuard> {
    if events.is_empty() {
        return Vec::new();
    }
    let mut guards = Vec::new();
    let mut feeds = Vec::new();
    for (i, (replica, endpoint)) in client.replicas().iter().zip(events).enumerate() {
        let (guard, status) = feed::spawn(replica.clone(), endpoint.clone(), canary.is_some());
        guards.push(guard);
        feeds.push((i, status));
    }
    if let Some(period) = canary {
        guards.push(canary::spawn(client.clone(), feeds, period));
    }
    guards
}

/// Leading keys of `keys` in `ids`. Binary search: the engine caches a prompt's blocks as a
/// chain, so held keys form a prefix except where the engine evicted an inner block (the
/// search may then count past it; the engine would not reuse past it, so a rare
/// overestimate).
pub fn held_prefix(ids: &FastSet<u64>, keys: &[u64]) -> usize {
    let (mut lo, mut hi) = (0usize, keys.len());
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if ids.contains(&keys[mid - 1]) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

#[cfg(test)]
mod tests;
