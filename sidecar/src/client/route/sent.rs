//! What recache sent where: per replica, the route keys of the prompts it was given, with the
//! time each was last sent. The prefix rule's approximate view of each replica's cache
//! (no KV events needed): a key sent within the TTL, among the replica's `capacity` most
//! recently sent, is taken to be cached there.
//!
//! Bounded: each replica keeps about `capacity` keys. Past `capacity` plus a quarter, one
//! sweep drops the least recently sent down to `capacity` (a linear-time selection on the
//! send times), so a touch is one map insert and the sweep's cost, spread over the quarter's
//! inserts, is a few nanoseconds per key; memory and lookup cost do not grow with traffic.
//! (An exact LRU, a map plus a log of touches, cost three to four map operations per key and
//! kept the 100k-key decision's p99 above 5 µs.)

// Keys are already hashes: the eviction crate's integer hasher, not SipHash.
use recache_eviction::hash::FastMap;

/// One replica's record.
#[derive(Debug, Default)]
pub struct Sent {
    /// Key → when it was last sent (ms on the rule's clock).
    last: FastMap<u64, u64>,
}

impl Sent {
    pub fn len(&self) -> usize {
        self.last.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }

    fn fresh(&self, key: u64, now: u64, ttl: u64) -> bool {
        self.last
            .get(&key)
            .is_some_and(|&t| now.saturating_sub(t) <= ttl)
    }

    /// How many of `keys` (a chain: a prefix of a prompt) this replica holds, from the start.
    /// Binary search: the blocks of one prompt are sent together and a shared prefix is sent
    /// at least as recently as what follows it, so held keys form a prefix of the chain.
    pub fn matched(&self, keys: &[u64], now: u64, ttl: u64) -> usize {
        let (mut lo, mut hi) = (0usize, keys.len());
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.fresh(keys[mid - 1], now, ttl) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }

    /// Records that `keys` were sent at `now`; past `capacity` + 25%, drops the least
    /// recently sent down to `capacity`.
    pub fn touch(&mut self, keys: &[u64], now: u64, capacity: usize) {
        for &k in keys {
            self.last.insert(k, now);
        }
        if self.last.len() > capacity + capacity / 4 {
            self.sweep(capacity);
        }
    }

    /// Keeps the `capacity` most recently sent keys (among keys sent in the same
    /// millisecond as the oldest kept, an arbitrary few).
    fn sweep(&mut self, capacity: usize) {
        let drop = self.last.len().saturating_sub(capacity);
        if drop == 0 {
            return;
        }
        let mut times: Vec<u64> = self.last.values().copied().collect();
        let (_, &mut cut, newer) = times.select_nth_unstable(drop - 1);
        let mut room = capacity - newer.iter().filter(|&&t| t > cut).count();
        self.last.retain(|_, t| {
            *t > cut
                || (*t == cut && room > 0 && {
                    room -= 1;
                    true
                })
        });
    }

    /// Forgets everything (the replica restarted or was removed).
    pub fn clear(&mut self) {
        self.last.clear();
    }
}

#[cfg(test)]
#[path = "sent_tests.rs"]
mod tests;
