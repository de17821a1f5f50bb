//! Seeded random inputs for the CPU reference tests and the GPU parity tests
//! (the same builders on both sides keep the shapes realistic and the runs
//! reproducible). Not used on any serving path.

use crate::dtype::KvDtype;
use crate::scatter::Segment;
use crate::trie::Trie;

/// SplitMix64: tiny, seedable, good enough for test data.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// New generator from a seed.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(recache_hash::GOLDEN);
        recache_hash::finalize(self.0)
    }

    /// Uniform in `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// Random storage values roughly like post-projection K/V (|x| < 4).
    pub fn kv_bits(&mut self, dtype: KvDtype, n: usize) -> Vec<u16> {
        (0..n)
            .map(|_| dtype.from_f32(self.uniform(-4.0, 4.0)))
            .collect()
    }
}

/// `n_items` random semantic ids of `levels` tokens, level `l` drawing from
/// its own codebook range `[l*codebook, (l+1)*codebook)` of the vocabulary.
pub fn random_items(rng: &mut Rng, n_items: usize, levels: usize, codebook: u32) -> Vec<Vec<u32>> {
    (0..n_items)
        .map(|_| {
            (0..levels as u32)
                .map(|l| l * codebook + rng.below(codebook as u64) as u32)
                .collect()
        })
        .collect()
}

/// Beam nodes for step `depth`: each beam sits on a random trie node of that
/// depth (found by walking random children from the root).
pub fn random_beam_nodes(rng: &mut Rng, trie: &Trie, beams: usize, depth: usize) -> Vec<i32> {
    (0..beams)
        .map(|_| {
            let mut n = 0i32;
            for _ in 0..depth {
                let (_, kids) = trie.children(n);
                if kids.is_empty() {
                    return -1;
                }
                n = kids[rng.below(kids.len() as u64) as usize];
            }
            n
        })
        .collect()
}

/// Log-prob-like values in `[-20, 0)` with deliberate exact ties (values are
/// quantised to 1/64) so the tie-break order is exercised.
pub fn random_log_probs(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| -((rng.below(20 * 64) + 1) as f32) / 64.0)
        .collect()
}

/// `n_items` segments of `len` tokens: item `i` lives at pool slots
/// `[i*len, (i+1)*len)` of a pool with room for `pool_items`, and is placed at
/// a random request position with a random, shuffled set of engine slots.
pub fn random_segments(
    rng: &mut Rng,
    n_items: usize,
    len: usize,
    pool_items: usize,
    num_dst_slots: usize,
    max_pos: i32,
) -> (Vec<Segment>, Vec<i64>) {
    let total = n_items * len;
    // Distinct destination slots: a random stride walk modulo a prime-free
    // choice would be clever; a partial Fisher-Yates is simple and exact.
    let mut slots: Vec<i64> = (0..num_dst_slots as i64).collect();
    for i in 0..total.min(num_dst_slots) {
        let j = i + rng.below((num_dst_slots - i) as u64) as usize;
        slots.swap(i, j);
    }
    slots.truncate(total);
    let segs = (0..n_items)
        .map(|i| Segment {
            src_slot: (rng.below(pool_items as u64) as usize * len) as i64,
            len: len as i32,
            tok_offset: (i * len) as i32,
            dst_pos: rng.below(max_pos as u64) as i32,
        })
        .collect();
    (segs, slots)
}
