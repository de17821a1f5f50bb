//! The project's one FNV-1a and one SplitMix64. Block content ids, the order file's checksum,
//! PTX cache keys, the eviction crate's id hasher, seeded benchmark workloads and kernel test
//! data all hash with these, so a constant is written once and every copy agrees. Stable
//! across Rust versions and machines (std's hasher is neither); not cryptographic.
//!
//! - [`blocks`]: content ids of KV blocks (a chain hash over full blocks of token ids).
//! - [`placement`]: where a GR entity lives across replicas (rendezvous hashing, hot share).

pub mod blocks;
pub mod placement;

/// FNV-1a's 64-bit offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's 64-bit prime.
pub const FNV_PRIME: u64 = 0x0100_0000_01b3;
/// SplitMix64's increment (the golden ratio in 64 bits).
pub const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// FNV-1a of `bytes`.
pub fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    fnv1a_from(FNV_OFFSET, bytes)
}

/// FNV-1a of `bytes` continued from state `h`.
pub fn fnv1a_from(h: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes
        .into_iter()
        .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// SplitMix64's output function: a bijective, well-mixed function of `z`.
pub fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One SplitMix64 step from `x`: `finalize(x + GOLDEN)`.
pub fn mix64(x: u64) -> u64 {
    finalize(x.wrapping_add(GOLDEN))
}

/// The SplitMix64 generator: tiny, seedable, reproducible everywhere.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        finalize(self.0)
    }

    /// Uniform in [0, 1) (53 random bits).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        assert_eq!(fnv1a([]), FNV_OFFSET);
        assert_eq!(fnv1a(*b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(*b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a_from(fnv1a(*b"foo"), *b"bar"), fnv1a(*b"foobar"));
        // SplitMix64 seeded with 0 (Vigna's reference implementation).
        let mut g = SplitMix64::new(0);
        assert_eq!(g.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(g.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(mix64(0), 0xe220_a839_7b1d_cdaf);
        let u = SplitMix64::new(7).unit();
        assert!((0.0..1.0).contains(&u));
    }
}
