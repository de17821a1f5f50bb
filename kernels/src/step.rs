//! One step of a search whose beams each offer a few tokens (retrieval's trie walk), posed as
//! a [`BeamStep`] the beam top-k kernel (or its CPU reference) can take: the step's offered
//! tokens become a small vocabulary, each live beam a row of it (padded to `width` rows with
//! inactive beams), and a step-local trie whose node `b` offers beam `b`'s tokens, each edge
//! its own leaf so a choice names the (beam, token) it came from.

use crate::beam::{BeamChoice, BeamStep, MAX_PER_BEAM_K};
use crate::trie::Trie;

/// A step's inputs, owned; [`LocalStep::step`] borrows them as the kernel's.
pub struct LocalStep {
    log_probs: Vec<f32>,
    vocab: usize,
    beam_scores: Vec<f32>,
    beam_node: Vec<i32>,
    trie: Trie,
    /// Per local leaf (node `rows + e`): (beam, token, the caller's node for that edge).
    edges: Vec<(usize, u32, i32)>,
}

impl LocalStep {
    /// `scores[b]`: beam `b`'s score so far; `offers[b]`: its (token, caller's node) edges;
    /// `rows[b]`: the log-probability of each offered token, in `offers[b]`'s order (missing
    /// ones count as impossible). None when no beam offers anything.
    pub fn new(
        scores: &[f32],
        offers: &[Vec<(u32, i32)>],
        rows: &[Vec<f64>],
        width: usize,
    ) -> Option<Self> {
        let mut vocab: Vec<u32> = offers.iter().flatten().map(|(t, _)| *t).collect();
        vocab.sort_unstable();
        vocab.dedup();
        if vocab.is_empty() {
            return None;
        }
        let col = |t: u32| vocab.binary_search(&t).unwrap_or(0);
        let rows_n = width.max(scores.len());
        let v = vocab.len();
        let mut s = Self {
            log_probs: vec![f32::NEG_INFINITY; rows_n * v],
            vocab: v,
            beam_scores: vec![f32::NEG_INFINITY; rows_n],
            beam_node: vec![-1; rows_n],
            trie: Trie {
                row_ptr: vec![0],
                ..Default::default()
            },
            edges: Vec::new(),
        };
        for r in 0..rows_n {
            if let (Some(&score), Some(offer)) = (scores.get(r), offers.get(r)) {
                s.beam_scores[r] = score;
                s.beam_node[r] = r as i32;
                let lps = rows.get(r).map(Vec::as_slice).unwrap_or(&[]);
                let mut sorted: Vec<(usize, u32, i32, f64)> = offer
                    .iter()
                    .zip(lps.iter().chain(std::iter::repeat(&f64::NEG_INFINITY)))
                    .map(|((t, n), lp)| (col(*t), *t, *n, *lp))
                    .collect();
                sorted.sort_unstable_by_key(|e| e.0);
                for (c, t, n, lp) in sorted {
                    s.log_probs[r * v + c] = lp as f32;
                    s.trie.child_token.push(c as i32);
                    s.trie.child_node.push((rows_n + s.edges.len()) as i32);
                    s.edges.push((r, t, n));
                }
            }
            s.trie.row_ptr.push(s.trie.child_token.len() as i32);
        }
        for _ in 0..s.edges.len() {
            s.trie.row_ptr.push(s.trie.child_token.len() as i32);
        }
        Some(s)
    }

    /// The kernel's view of the step.
    pub fn step(&self) -> BeamStep<'_> {
        let rows = self.beam_scores.len();
        BeamStep {
            log_probs: &self.log_probs,
            row_stride: self.vocab,
            vocab: self.vocab,
            beam_scores: &self.beam_scores,
            beam_node: &self.beam_node,
            trie: &self.trie,
            per_beam_k: rows.min(MAX_PER_BEAM_K),
        }
    }

    /// The kernel's choices as (beam, (token, caller's node), score), best first; padding and
    /// impossible choices dropped.
    pub fn decode(&self, choices: Vec<BeamChoice>) -> Vec<(usize, (u32, i32), f32)> {
        let rows = self.beam_scores.len();
        choices
            .into_iter()
            .filter(|c| c.node >= 0 && c.score > f32::NEG_INFINITY)
            .filter_map(|c| {
                let (beam, token, node) = *self.edges.get((c.node as usize).checked_sub(rows)?)?;
                Some((beam, (token, node), c.score))
            })
            .collect()
    }
}
