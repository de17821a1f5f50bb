//! Constrained beam top-k: the candidate ordering key and the CPU references.
//!
//! Candidate `(beam b, token t)` of a step has score
//! `beam_scores[b] + log_probs[b*row_stride + t]` (one fp32 add, so CPU and
//! GPU scores are bit-identical; NaN is treated as -inf). Candidates are
//! totally ordered by (score descending, beam ascending, token ascending):
//! [`candidate_key`] packs that order into a `u64` compared descending, and
//! key 0 means "no candidate". Each beam contributes at most `per_beam_k`
//! candidates (its best by that order); the step keeps the global best
//! `beam_width`, padding with [`BeamChoice::NONE`] when fewer exist.

use crate::error::{KernelError, Result};
use crate::trie::Trie;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Largest beam width the GPU selection supports (its shared buffers).
pub const MAX_BEAM_WIDTH: usize = 2048;
/// Largest per-beam candidate count (half the per-beam sort buffer).
pub const MAX_PER_BEAM_K: usize = 1024;
/// Candidates the GPU's final in-shared-memory sort can hold.
pub const SELECT_CAP: usize = 4096;

/// Order-preserving map of an fp32 score to `u32` (NaN maps like -inf).
pub fn score_ord(score: f32) -> u32 {
    let s = if score.is_nan() {
        f32::NEG_INFINITY
    } else {
        score
    };
    let bits = s.to_bits();
    if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    }
}

/// Inverse of [`score_ord`].
pub fn ord_score(ord: u32) -> f32 {
    f32::from_bits(if ord & 0x8000_0000 != 0 {
        ord & 0x7fff_ffff
    } else {
        !ord
    })
}

/// Sort key: larger is better; ties on score go to the lower (beam, token).
/// Requires `beam * vocab + token < 2^32`. Never 0 for a real candidate.
pub fn candidate_key(score: f32, beam: u32, token: u32, vocab: u32) -> u64 {
    let flat = beam * vocab + token;
    ((score_ord(score) as u64) << 32) | (u32::MAX - flat) as u64
}

/// One selected beam of the next step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BeamChoice {
    /// Parent beam index, -1 for padding.
    pub parent: i32,
    /// Chosen token, -1 for padding.
    pub token: i32,
    /// New beam score.
    pub score: f32,
    /// Trie node after the token, -1 for padding.
    pub node: i32,
}

impl BeamChoice {
    /// Padding entry when fewer than `beam_width` candidates exist.
    pub const NONE: Self = Self {
        parent: -1,
        token: -1,
        score: f32::NEG_INFINITY,
        node: -1,
    };
}

/// Host mirror of one beam step's inputs.
pub struct BeamStep<'a> {
    /// `[beam_width, row_stride]` log-probs, fp32.
    pub log_probs: &'a [f32],
    /// Elements between consecutive beams' rows (>= vocab).
    pub row_stride: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// `[beam_width]` cumulative scores.
    pub beam_scores: &'a [f32],
    /// `[beam_width]` trie node of each beam; < 0 for an inactive beam.
    pub beam_node: &'a [i32],
    /// Valid-item trie.
    pub trie: &'a Trie,
    /// Candidates kept per beam before the global selection.
    pub per_beam_k: usize,
}

impl BeamStep<'_> {
    /// Beam width (= number of outputs).
    pub fn beam_width(&self) -> usize {
        self.beam_scores.len()
    }

    /// Validate shapes and limits shared with the GPU path.
    pub fn validate(&self) -> Result<()> {
        let bw = self.beam_width();
        if bw == 0 || bw > MAX_BEAM_WIDTH || self.beam_node.len() != bw {
            return Err(KernelError::invalid(
                "beam_width",
                format!("{bw} not in 1..={MAX_BEAM_WIDTH} or beam_node length differs"),
            ));
        }
        if self.per_beam_k == 0 || self.per_beam_k > MAX_PER_BEAM_K {
            return Err(KernelError::invalid(
                "per_beam_k",
                format!("{} not in 1..={MAX_PER_BEAM_K}", self.per_beam_k),
            ));
        }
        if self.vocab == 0
            || self.row_stride < self.vocab
            || (bw as u64) * (self.vocab as u64) >= u32::MAX as u64
        {
            return Err(KernelError::invalid(
                "vocab_size",
                "need 0 < vocab <= row_stride and beam_width*vocab < 2^32",
            ));
        }
        if self.log_probs.len() < (bw - 1) * self.row_stride + self.vocab {
            return Err(KernelError::invalid(
                "log_probs",
                "shorter than beam_width rows",
            ));
        }
        self.trie.validate(self.vocab)
    }

    /// Beam `b`'s best `per_beam_k` candidate keys, descending.
    pub fn beam_candidates(&self, b: usize) -> Vec<u64> {
        let (toks, _) = self.trie.children(self.beam_node[b]);
        let mut keys: Vec<u64> = toks
            .iter()
            .map(|&t| {
                let s = self.beam_scores[b] + self.log_probs[b * self.row_stride + t as usize];
                candidate_key(s, b as u32, t as u32, self.vocab as u32)
            })
            .collect();
        keys.sort_unstable_by(|a, b| b.cmp(a));
        keys.truncate(self.per_beam_k);
        keys
    }

    /// Decode a key back into a choice (looks up the child node).
    pub fn decode(&self, key: u64) -> BeamChoice {
        if key == 0 {
            return BeamChoice::NONE;
        }
        let flat = u32::MAX - key as u32;
        let (b, t) = (flat / self.vocab as u32, (flat % self.vocab as u32) as i32);
        let (toks, nodes) = self.trie.children(self.beam_node[b as usize]);
        let node = toks.binary_search(&t).map(|i| nodes[i]).unwrap_or(-1);
        BeamChoice {
            parent: b as i32,
            token: t,
            score: ord_score((key >> 32) as u32),
            node,
        }
    }

    fn finish(&self, mut keys: Vec<u64>) -> Vec<BeamChoice> {
        keys.resize(self.beam_width(), 0);
        keys.into_iter().map(|k| self.decode(k)).collect()
    }
}

/// Result of the early-terminated reference.
pub struct HeapResult {
    /// Selected beams, best first.
    pub choices: Vec<BeamChoice>,
    /// Candidates examined, the stopping candidate of each beam included.
    pub visited: usize,
    /// Candidates that exist (sum of per-beam list lengths).
    pub total: usize,
}

/// xGR §6 reference: visit each beam's candidates in descending order into a
/// size-`beam_width` min-heap; a beam stops at the first candidate that cannot
/// enter the heap (it is <= the heap minimum while the heap is full).
pub fn beam_topk_reference(step: &BeamStep<'_>) -> Result<HeapResult> {
    step.validate()?;
    let bw = step.beam_width();
    let mut heap: BinaryHeap<Reverse<u64>> = BinaryHeap::with_capacity(bw + 1);
    let (mut visited, mut total) = (0, 0);
    for b in 0..bw {
        let cands = step.beam_candidates(b);
        total += cands.len();
        for &k in &cands {
            visited += 1;
            if heap.len() == bw {
                match heap.peek() {
                    Some(&Reverse(min)) if k <= min => break,
                    _ => {}
                }
                heap.pop();
            }
            heap.push(Reverse(k));
        }
    }
    let mut keys: Vec<u64> = heap.into_iter().map(|Reverse(k)| k).collect();
    keys.sort_unstable_by(|a, b| b.cmp(a));
    Ok(HeapResult {
        choices: step.finish(keys),
        visited,
        total,
    })
}

/// Brute force over the full `beam_width x vocab` grid: build the
/// valid-next-token mask from the trie, score every allowed cell, fully sort.
/// Equals the constrained top-k whenever `per_beam_k >= beam_width`.
pub fn beam_topk_brute_force(step: &BeamStep<'_>) -> Result<Vec<BeamChoice>> {
    step.validate()?;
    let mut all = Vec::new();
    for b in 0..step.beam_width() {
        let mut mask = vec![false; step.vocab];
        for &t in step.trie.children(step.beam_node[b]).0 {
            mask[t as usize] = true;
        }
        for (t, _) in mask.iter().enumerate().filter(|(_, m)| **m) {
            let s = step.beam_scores[b] + step.log_probs[b * step.row_stride + t];
            all.push(candidate_key(s, b as u32, t as u32, step.vocab as u32));
        }
    }
    all.sort_unstable_by(|a, b| b.cmp(a));
    all.truncate(step.beam_width());
    Ok(step.finish(all))
}
