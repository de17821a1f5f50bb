//! Reading the eviction order recache publishes (`recache_adapters::order` file format) for
//! the engine-side patch: re-read only when the file changed, tell fresh from stale from
//! absent, and answer "where does this block hash rank" for a batch of hashes at once (one
//! C call per eviction decision, not one per block).
//!
//! A missing, torn or old file is a state, not an error: the caller then keeps the engine's
//! native order.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use recache_adapters::order::Order;

/// Rank of a hash the order does not list.
pub const UNRANKED: u64 = u64::MAX;

/// What the caller may do with the order it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum OrderState {
    /// Valid and younger than the age limit: follow it.
    Fresh = 0,
    /// Valid but older than the age limit (recache stopped or stalled): ignore it.
    Stale = 1,
    /// No file, or not a valid order: ignore it.
    Absent = 2,
}

/// One reader of one order file. Not thread-safe (the engine's scheduler is one thread).
#[derive(Debug)]
pub struct OrderReader {
    path: PathBuf,
    stamp: Option<(i64, i64, u64, u64)>,
    order: Option<Order>,
    ranks: HashMap<u64, u64>,
    /// Bumped whenever the order held changes (read anew, or gone), so a caller that copied
    /// the listed hashes knows when its copy is out of date.
    version: u64,
}

impl OrderReader {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            stamp: None,
            order: None,
            ranks: HashMap::new(),
            version: 0,
        }
    }

    /// Re-reads the file if its (mtime, size, inode) changed; the writer renames a new file
    /// into place, so a changed inode is a new order.
    pub fn refresh(&mut self) {
        let Ok(meta) = std::fs::metadata(&self.path) else {
            self.set(None);
            self.stamp = None;
            return;
        };
        let stamp = (meta.mtime(), meta.mtime_nsec(), meta.len(), meta.ino());
        if self.stamp == Some(stamp) {
            return;
        }
        self.stamp = Some(stamp);
        let order = std::fs::read(&self.path)
            .ok()
            .and_then(|b| Order::decode(&b).ok());
        self.set(order);
    }

    fn set(&mut self, order: Option<Order>) {
        if order.is_some() || self.order.is_some() {
            self.version += 1;
        }
        self.ranks.clear();
        if let Some(o) = &order {
            self.ranks.reserve(o.victims.len());
            for (i, h) in o.victims.iter().enumerate() {
                self.ranks.entry(*h).or_insert(i as u64);
            }
        }
        self.order = order;
    }

    /// The state of the order held, for an age limit in milliseconds.
    pub fn state(&self, max_age_ms: u64) -> OrderState {
        let Some(o) = &self.order else {
            return OrderState::Absent;
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        if now.saturating_sub(o.publish_unix_ms) > max_age_ms {
            OrderState::Stale
        } else {
            OrderState::Fresh
        }
    }

    pub fn order(&self) -> Option<&Order> {
        self.order.as_ref()
    }

    /// Changes whenever the order held does (see the field).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Position of `hash` in the order (0 = evict first), or [`UNRANKED`].
    pub fn rank(&self, hash: u64) -> u64 {
        self.ranks.get(&hash).copied().unwrap_or(UNRANKED)
    }
}
