//! What recache sent where: per replica, the route keys of the prompts it was given, with the
//! time each was last sent. The prefix rule's approximate view of each replica's cache
//! (no KV events needed): a key sent within the TTL, among the replica's `capacity` most
//! recently sent, is taken to be cached there.
//!
//! Bounded: each replica keeps at most `capacity` keys, dropping the least recently sent (an
//! append-only log of touches, compacted when it outgrows twice the capacity), so memory and
//! lookup cost do not grow with traffic.

use std::collections::VecDeque;

// Keys are already hashes: the eviction crate's integer hasher, not SipHash.
use recache_eviction::hash::FastMap;

/// One replica's record.
#[derive(Debug, Default)]
pub struct Sent {
    /// Key → when it was last sent (ms on the rule's clock).
    last: FastMap<u64, u64>,
    /// Touches in time order; entries whose time no longer matches `last` are stale.
    log: VecDeque<(u64, u64)>,
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

    /// Records that `keys` were sent at `now`, dropping the least recently sent keys beyond
    /// `capacity`.
    pub fn touch(&mut self, keys: &[u64], now: u64, capacity: usize) {
        for &k in keys {
            self.last.insert(k, now);
            self.log.push_back((k, now));
        }
        while self.last.len() > capacity {
            let Some((k, t)) = self.log.pop_front() else {
                break;
            };
            if self.last.get(&k) == Some(&t) {
                self.last.remove(&k);
            }
        }
        if self.log.len() > 2 * capacity.max(1024) {
            self.compact();
        }
    }

    /// Rebuilds the log from the live keys (amortised: runs once per `capacity` touches).
    fn compact(&mut self) {
        let mut live: Vec<(u64, u64)> = self.last.iter().map(|(&k, &t)| (k, t)).collect();
        live.sort_unstable_by_key(|&(_, t)| t);
        self.log = live.into();
    }

    /// Forgets everything (the replica restarted or was removed).
    pub fn clear(&mut self) {
        self.last.clear();
        self.log.clear();
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
        assert!(s.len() <= 64, "{}", s.len());
        assert!(
            s.log.len() <= 2 * 1024 + 3,
            "log compacted: {}",
            s.log.len()
        );
        assert_eq!(s.matched(&[42], 10_000, u64::MAX), 1);
        assert_eq!(s.matched(&[9_999], 10_000, u64::MAX), 1);
        assert_eq!(s.matched(&[5], 10_000, u64::MAX), 0);
        s.clear();
        assert!(s.is_empty());
    }
}
