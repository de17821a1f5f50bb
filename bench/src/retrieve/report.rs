//! What `bench retrieve` prints: one row per beam width ([`WidthRow`]) in a [`Report`] (the
//! JSON), and its text table.

use serde::Serialize;

/// One beam width's results (and the prompt alignment it ran with).
#[derive(Debug, Clone, Serialize)]
pub struct WidthRow {
    pub beam_width: usize,
    pub align: usize,
    pub retrievals: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Engine-computed tokens per retrieval (prompt tokens not served from cache, from the
    /// engine's own prefix-cache counters over the width's run), mean.
    pub computed_tokens: f64,
    /// `computed_tokens` over the greedy baseline's (same users).
    pub computed_vs_greedy: f64,
    /// Cached share of all prompt tokens the search sent.
    pub cached_share: f64,
    /// recache's calls to the engine per retrieval (one per search step since the batched
    /// steps), mean.
    pub engine_calls: f64,
    pub stopped_early_share: f64,
    /// Returned ids not in the catalog (ours), and returned duplicates.
    pub invalid_items: usize,
    pub duplicate_items: usize,
    /// Unconstrained beam search on the same prompts: share of its top-k codes that are not
    /// items, and its computed tokens per retrieval.
    pub unconstrained_invalid_rate: Option<f64>,
    pub unconstrained_computed_tokens: Option<f64>,
    /// Top logprobs the engine returned per beam step (the unconstrained search's fan-out).
    pub unconstrained_fanout: Option<usize>,
    /// With `--prompt codes`: the held-out item among the first 10 returned (mean), and
    /// NDCG@10; the same for the unconstrained search's post-filtered codes.
    pub recall_at_10: Option<f64>,
    pub ndcg_at_10: Option<f64>,
    pub unconstrained_recall_at_10: Option<f64>,
}

/// The popularity baseline's quality on the same held-out users (`--prompt codes`).
#[derive(Debug, Clone, Serialize)]
pub struct Popularity {
    pub recall_at_10: f64,
    pub ndcg_at_10: f64,
}

/// Everything the bench prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub upstream: String,
    pub model: String,
    pub engine: String,
    pub users: usize,
    /// `titles` or `codes` (`--prompt`).
    pub prompt: &'static str,
    pub popularity: Option<Popularity>,
    pub top_k: usize,
    pub index_items: usize,
    pub index_depth: usize,
    pub mean_prompt_tokens: f64,
    /// Greedy decode of `index_depth` tokens: uncached prompt + depth - 1 decode steps.
    pub greedy_computed_tokens: f64,
    pub rows: Vec<WidthRow>,
    /// Whether the width-32 row (aligned) meets the goal (computed ≤ 1.2× greedy).
    pub goal_computed_at_32: Option<bool>,
    pub notes: Vec<String>,
}

pub fn table(r: &Report) -> String {
    let mut s = format!(
        "{} users, prompt {:.0} tokens, greedy {:.0} computed tokens\n{:>5} {:>5} {:>8} {:>8} {:>9} {:>7} {:>7} {:>8} {:>13}\n",
        r.users,
        r.mean_prompt_tokens,
        r.greedy_computed_tokens,
        "width",
        "align",
        "p50_ms",
        "p99_ms",
        "computed",
        "x_gdy",
        "cached",
        "invalid",
        "unconstr_inv"
    );
    for w in &r.rows {
        s += &format!(
            "{:>5} {:>5} {:>8.1} {:>8.1} {:>9.0} {:>7.2} {:>7.3} {:>8} {:>13}\n",
            w.beam_width,
            w.align,
            w.p50_ms,
            w.p99_ms,
            w.computed_tokens,
            w.computed_vs_greedy,
            w.cached_share,
            w.invalid_items,
            w.unconstrained_invalid_rate
                .map_or("-".into(), |x| format!("{x:.3}"))
        );
        if let (Some(r), Some(g)) = (w.recall_at_10, w.ndcg_at_10) {
            s += &format!("      recall@10 {r:.4}  ndcg@10 {g:.4}\n");
        }
    }
    if let Some(p) = &r.popularity {
        s += &format!(
            "popularity: recall@10 {:.4}  ndcg@10 {:.4}\n",
            p.recall_at_10, p.ndcg_at_10
        );
    }
    s
}
