//! What the engine's shim says it does with recache's eviction order. The steering plugins
//! (`shim/python/recache_shim/order_reader.py`) write `ORDER.status` beside the order file:
//! when they open the order, when its freshness changes, and at most once a second while they
//! check it. The engine loop reads it after publishing, at most once a second, into metrics,
//! so a fallback to the engine's own eviction shows in recache's `/metrics` rather than only in
//! the engine's log:
//!
//! - `recache_kv_shim_state{state}`: 1 for the current state, 0 for the others: `absent` (no
//!   status: no shim reads this order — RECACHE_SHIM_ORDER names another file, or the plugin
//!   is not installed — or the engine has not started), `installed` (the shim opened the order
//!   and has not needed it yet: nothing evicted), `fresh` (its last check followed the order),
//!   `stale` (its last check found the order stale, missing or damaged: the engine's own
//!   eviction decided);
//! - `recache_kv_shim_went_stale`: the shim's count of fresh orders that went stale;
//! - `recache_kv_shim_steer_seconds`: the shim's count of seconds spent steering allocations
//!   (its cost inside the engine; `steer_s` in the status, vLLM only);
//! - `recache_kv_shim_status_age_seconds`: how long ago the shim wrote its status (it writes
//!   only while the engine evicts, so a large age on an idle engine is normal).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

/// The fields recache reads; the shim writes more (its other counters).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Status {
    #[serde(default)]
    pub engine: String,
    /// The engine process the shim runs in (0 when not given).
    #[serde(default)]
    pub pid: u32,
    pub fresh: bool,
    /// Whether the shim has checked the order yet (false right after it opened it).
    #[serde(default)]
    pub checked: bool,
    pub unix_ms: u64,
    #[serde(default)]
    pub went_stale: u64,
    /// Seconds the shim has spent steering allocations (absent from older shims: 0).
    #[serde(default)]
    pub steer_s: f64,
}

/// The shim's state, as `recache_kv_shim_state` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShimState {
    Absent,
    Installed,
    Fresh,
    Stale,
}

impl ShimState {
    pub const ALL: [ShimState; 4] = [Self::Absent, Self::Installed, Self::Fresh, Self::Stale];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Absent => "absent",
            Self::Installed => "installed",
            Self::Fresh => "fresh",
            Self::Stale => "stale",
        }
    }

    pub fn of(status: Option<&Status>) -> Self {
        match status {
            None => Self::Absent,
            Some(s) if !s.checked => Self::Installed,
            Some(s) if s.fresh => Self::Fresh,
            Some(_) => Self::Stale,
        }
    }
}

/// `ORDER.status` for the order at `order`.
pub fn path_for(order: &Path) -> PathBuf {
    let mut p = order.as_os_str().to_owned();
    p.push(".status");
    PathBuf::from(p)
}

/// The status beside `order`, if there is a readable one (a torn or foreign file reads as
/// none: the shim renames complete files into place).
pub fn read(order: &Path) -> Option<Status> {
    let bytes = std::fs::read(path_for(order)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// How old `status` is at `now`.
pub fn age(status: &Status, now: SystemTime) -> Duration {
    let written = UNIX_EPOCH + Duration::from_millis(status.unix_ms);
    now.duration_since(written).unwrap_or_default()
}

#[cfg(test)]
#[path = "shim_status_tests.rs"]
mod tests;
