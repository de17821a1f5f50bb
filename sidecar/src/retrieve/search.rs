//! Constrained beam search over the index's trie, with early stopping.
//!
//! Each step asks the scorer, for all live beams at once, for the log-probability of every
//! token the trie allows after each beam (subtrees whose items are all excluded are not
//! offered), then
//! keeps the best `beam_width` of (beam × allowed token) through recache's beam top-k — the
//! CUDA kernel when the machine has a GPU, else its CPU reference (`topk`), fed one step at a
//! time over the step's own small vocabulary. A beam that reaches a leaf is a finished item. Scores are sums
//! of log-probabilities, so a beam can only fall: once `top_k` items are finished, a beam
//! scoring no better than the k-th of them is dropped before it costs an engine call, and the
//! search stops when none is left (the early stop).

use std::collections::HashMap;
use std::future::Future;

pub use futures_util::future::join_all;

use recache_kernels::step::LocalStep;

use super::index::RetrieveIndex;

/// One beam's question in a step: its code tokens so far and the tokens offered after them.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    pub beam: &'a [u32],
    pub next: &'a [u32],
}

/// What the scorer answered for one step: per ask a log-probability per offered token (same
/// order), and what the step cost the engine.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepScores {
    pub logprobs: Vec<Vec<f64>>,
    pub engine_calls: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
}

/// Scores the tokens that may follow each beam's code tokens (the scorer adds the prompt).
pub trait Scorer {
    type Error;
    fn score_step(
        &self,
        asks: &[Ask<'_>],
    ) -> impl Future<Output = Result<StepScores, Self::Error>> + Send;
}

/// One search.
#[derive(Debug, Clone)]
pub struct SearchSpec {
    pub beam_width: usize,
    pub top_k: usize,
    /// Index positions of items never to return.
    pub exclude: Vec<usize>,
}

/// A finished item: its index position and score (sum of log-probabilities of its code).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Found {
    pub item: usize,
    pub score: f32,
}

/// What the search did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchStats {
    pub steps: usize,
    pub engine_calls: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// Beams dropped because they could no longer beat the k-th finished item.
    pub pruned_beams: u64,
    /// The search ended before the deepest level because no live beam could win.
    pub stopped_early: bool,
}

#[derive(Debug, Clone)]
struct Beam {
    tokens: Vec<u32>,
    node: i32,
    score: f32,
}

/// Runs the search; the best `top_k` items first (fewer if fewer exist).
pub async fn search<S: Scorer>(
    index: &RetrieveIndex,
    spec: &SearchSpec,
    scorer: &S,
) -> Result<(Vec<Found>, SearchStats), S::Error> {
    let excluded = excluded_counts(index, &spec.exclude);
    let allowed = |node: i32| -> Vec<(u32, i32)> {
        let (toks, kids) = index.trie.children(node);
        toks.iter()
            .zip(kids)
            .filter(|(_, k)| {
                let total = index.subtree_items[**k as usize];
                total > excluded.get(k).copied().unwrap_or(0)
            })
            .map(|(t, k)| (*t as u32, *k))
            .collect()
    };
    let mut stats = SearchStats::default();
    let mut found: Vec<Found> = Vec::new();
    let mut live = vec![Beam {
        tokens: Vec::new(),
        node: 0,
        score: 0.0,
    }];
    while !live.is_empty() {
        if found.len() >= spec.top_k {
            let kth = found[spec.top_k - 1].score;
            let before = live.len();
            live.retain(|b| b.score > kth);
            stats.pruned_beams += (before - live.len()) as u64;
            if live.is_empty() {
                stats.stopped_early = true;
                break;
            }
        }
        stats.steps += 1;
        let offers: Vec<Vec<(u32, i32)>> = live.iter().map(|b| allowed(b.node)).collect();
        let next: Vec<Vec<u32>> = offers
            .iter()
            .map(|o| o.iter().map(|(t, _)| *t).collect())
            .collect();
        // Beams with nothing left to offer are not asked; their rows stay empty.
        let asked: Vec<usize> = (0..live.len()).filter(|&b| !next[b].is_empty()).collect();
        let asks: Vec<Ask<'_>> = asked
            .iter()
            .map(|&b| Ask {
                beam: &live[b].tokens,
                next: &next[b],
            })
            .collect();
        let mut rows = vec![Vec::new(); live.len()];
        if !asks.is_empty() {
            let s = scorer.score_step(&asks).await?;
            stats.engine_calls += s.engine_calls;
            stats.prompt_tokens += s.prompt_tokens;
            stats.cached_tokens += s.cached_tokens;
            for (&b, lp) in asked.iter().zip(s.logprobs) {
                rows[b] = lp;
            }
        }
        let chosen = select(&live, &offers, &rows, spec.beam_width);
        let mut next_live = Vec::with_capacity(chosen.len());
        for (b, (token, node), score) in chosen {
            let mut tokens = live[b].tokens.clone();
            tokens.push(token);
            match index.leaf_item.get(&node) {
                Some(&item) => insert_found(&mut found, Found { item, score }),
                None => next_live.push(Beam {
                    tokens,
                    node,
                    score,
                }),
            }
        }
        live = next_live;
    }
    found.truncate(spec.top_k);
    Ok((found, stats))
}

/// Keeps finished items best first; ties by index position, so results are deterministic.
fn insert_found(found: &mut Vec<Found>, f: Found) {
    let at =
        found.partition_point(|g| g.score > f.score || (g.score == f.score && g.item < f.item));
    found.insert(at, f);
}

/// How many excluded items lie under each node.
fn excluded_counts(index: &RetrieveIndex, exclude: &[usize]) -> HashMap<i32, u32> {
    let mut counts = HashMap::new();
    let mut seen = std::collections::HashSet::new();
    for &item in exclude {
        if !seen.insert(item) {
            continue;
        }
        let Some(mut node) = index.trie.walk(&index.file.items[item].code) else {
            continue;
        };
        while node >= 0 {
            *counts.entry(node).or_insert(0) += 1;
            node = index.parent[node as usize];
        }
    }
    counts
}

/// One step's top-`width` of (beam × offered token), best first: (beam, (token, trie node),
/// score), through the beam top-k over the step's own small vocabulary ([`LocalStep`]).
fn select(
    live: &[Beam],
    offers: &[Vec<(u32, i32)>],
    rows: &[Vec<f64>],
    width: usize,
) -> Vec<(usize, (u32, i32), f32)> {
    let scores: Vec<f32> = live.iter().map(|b| b.score).collect();
    let Some(local) = LocalStep::new(&scores, offers, rows, width) else {
        return Vec::new();
    };
    super::topk::select(&local.step()).map_or_else(Vec::new, |c| local.decode(c))
}
