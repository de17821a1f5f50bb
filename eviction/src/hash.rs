//! A fast, deterministic hasher for integer block ids and a seeded mixer for
//! reproducible pseudo-randomness (oracle noise), so no RNG crate is needed.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Hash map keyed by block id with a multiplicative hasher: block ids are
/// engine hashes or dense integers, neither adversarial, so SipHash's
/// DoS resistance buys nothing on the per-request path.
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
pub type FastSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0 = recache_hash::fnv1a_from(self.0, bytes.iter().copied());
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = mix64(self.0 ^ n);
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

/// SplitMix64 step (`recache_hash::mix64`): a bijective, well-mixed function of `x`.
pub use recache_hash::mix64;

/// A deterministic uniform draw in [0, 1) from (seed, a, b).
pub fn unit(seed: u64, a: u64, b: u64) -> f64 {
    let h = mix64(mix64(seed ^ mix64(a)) ^ b);
    (h >> 11) as f64 / (1u64 << 53) as f64
}
