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
mod tests {
    use super::*;

    #[test]
    fn matches_the_sent_prefix_within_ttl() {
        let mut s = Sent::default();
        s.touch(&[1, 2, 3], 0, 100);
        assert_eq!(s.matched(&[1, 2, 3, 4], 10, 1000), 3);
        assert_eq!(s.matched(&[1, 2, 9], 10, 1000), 2);
        assert_eq!(
            s.matched(&[7, 8, 9], 10, 1000),
            0,
            "chained keys: a new first block changes all"
        );
        assert_eq!(s.matched(&[1, 2, 3], 2000, 1000), 0, "expired");
        assert_eq!(s.matched(&[], 0, 1000), 0);
    }

    #[test]
    fn keeps_the_most_recently_sent_within_capacity() {
        let mut s = Sent::default();
        for i in 0..10_000u64 {
            s.touch(&[i, i + 1_000_000], i, 64);
            // Retouching one key keeps it alive across the whole run.
            s.touch(&[42], i, 64);
        }
        assert!(s.len() <= 64 + 64 / 4, "{}", s.len());
        assert_eq!(s.matched(&[42], 10_000, u64::MAX), 1);
        assert_eq!(s.matched(&[9_999], 10_000, u64::MAX), 1);
        assert_eq!(s.matched(&[5], 10_000, u64::MAX), 0);
        // Keys sent in the same millisecond past the bound: the record keeps `capacity`.
        s.touch(
            &(0..200).map(|k| k + 5_000_000).collect::<Vec<u64>>(),
            20_000,
            64,
        );
        assert_eq!(s.len(), 64);
        s.clear();
        assert!(s.is_empty());
    }
}
