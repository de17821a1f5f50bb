//! The retrieve workload's pure parts: which returned code is a catalog item (`bench
//! retrieve`'s rule for its unconstrained baseline: a code counts as an item when one of its
//! prefixes is an item's whole code, so a token generated past a complete code is ignored),
//! what one answer returned (recache's item ids, or a peer's beam-search sequences as token
//! ids), the tally over a run, the row of one system × width × round, and from the summary
//! rows the width-32 goals and the workload's table.

use recache::harness::RetrieveIndex;
use serde_json::{Value, json};

use crate::peers::replicas::max_share;
use crate::peers::report;
use crate::stats::quantile;

/// The width the goals are checked at.
pub const GOAL_WIDTH: u64 = 32;

/// The item `code` names: the first of its prefixes that is an item's whole code.
pub fn item_of<'a>(index: &'a RetrieveIndex, code: &[u32]) -> Option<&'a str> {
    let mut node = 0i32;
    for &t in code {
        let (toks, kids) = index.trie.children(node);
        let i = toks.binary_search(&(t as i32)).ok()?;
        node = kids[i];
        if let Some(item) = index.item_at(node) {
            return Some(&item.id);
        }
    }
    None
}

/// One retrieval's returned items in the order given, each `None` when it is not an item.
pub type Returned = Vec<Option<String>>;

/// recache's `/v1/retrieve` answer: its first `k` `items[].id`, checked against the index.
pub fn recache_items(index: &RetrieveIndex, answer: &Value, k: usize) -> Result<Returned, String> {
    let items = (answer["items"].as_array()).ok_or_else(|| format!("no items in {answer}"))?;
    Ok(items
        .iter()
        .take(k)
        .map(|it| {
            (it["id"].as_str())
                .filter(|id| index.by_id.contains_key(*id))
                .map(str::to_string)
        })
        .collect())
}

/// A peer's answer (vLLM's completions beam search with `return_token_ids`, choices best
/// first): the first `k` choices' generated token ids, each mapped to the item it names.
pub fn peer_items(index: &RetrieveIndex, answer: &Value, k: usize) -> Result<Returned, String> {
    let choices =
        (answer["choices"].as_array()).ok_or_else(|| format!("no choices in {answer}"))?;
    let mut ordered: Vec<(u64, &Value)> = choices
        .iter()
        .map(|c| (c["index"].as_u64().unwrap_or(u64::MAX), c))
        .collect();
    ordered.sort_by_key(|(i, _)| *i);
    (ordered.iter().take(k))
        .map(|(_, c)| {
            let ids = c["token_ids"].as_array().ok_or_else(|| {
                "a choice without token_ids (return_token_ids did not reach the engine)".to_string()
            })?;
            let code: Vec<u32> = (ids.iter())
                .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                .collect::<Option<_>>()
                .ok_or_else(|| format!("token_ids that are not token ids: {ids:?}"))?;
            Ok(item_of(index, &code).map(str::to_string))
        })
        .collect()
}

/// What a run's successful retrievals returned, together.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tally {
    pub retrievals: usize,
    /// Sequences or items returned (at most top-k each).
    pub returned: usize,
    /// Of those, not a catalog item.
    pub invalid: usize,
    /// Distinct valid items per retrieval, summed.
    pub valid: usize,
    /// Retrievals that had an item to find, and the recall and NDCG at 10 summed over them.
    pub scored: usize,
    pub recall: f64,
    pub ndcg: f64,
}

impl Tally {
    pub fn add(&mut self, items: &[Option<String>]) {
        self.retrievals += 1;
        self.returned += items.len();
        self.invalid += items.iter().filter(|i| i.is_none()).count();
        let mut valid: Vec<&str> = items.iter().flatten().map(String::as_str).collect();
        valid.sort_unstable();
        valid.dedup();
        self.valid += valid.len();
    }

    /// One retrieval's quality against the item it should find.
    pub fn score(&mut self, items: &[Option<String>], target: &str) {
        let (r, g) = crate::retrieve::codes::hit(items, target);
        self.scored += 1;
        self.recall += r;
        self.ndcg += g;
    }

    /// Invalid over returned; None when nothing was returned.
    pub fn invalid_share(&self) -> Option<f64> {
        (self.returned > 0).then(|| self.invalid as f64 / self.returned as f64)
    }
}

/// One system × width × round as measured.
#[derive(Debug, Default)]
pub struct Run {
    pub system: &'static str,
    pub round: u32,
    pub beam_width: usize,
    pub top_k: usize,
    pub requests: usize,
    pub tally: Tally,
    /// Latency of each successful retrieval, ms.
    pub latencies_ms: Vec<f64>,
    pub errors: usize,
    pub first_error: Option<String>,
    pub wall_s: f64,
    /// Prompt tokens the engines looked up and found cached (their own counters).
    pub prompt_tokens: f64,
    pub cached_tokens: f64,
    pub per_replica: Option<Vec<f64>>,
    /// KV bytes of every replica's cache together.
    pub kv_bytes: u64,
}

impl Run {
    /// The row `bench peers` prints.
    pub fn row(mut self) -> Value {
        self.latencies_ms.sort_by(f64::total_cmp);
        let wall = self.wall_s.max(1e-9);
        let ok = self.tally.retrievals;
        json!({
            "system": self.system, "workload": "retrieve", "round": self.round,
            "beam_width": self.beam_width, "top_k": self.top_k, "requests": self.requests,
            "rps": ok as f64 / wall,
            "valid_items_per_s": self.tally.valid as f64 / wall,
            "invalid_share": self.tally.invalid_share(),
            "valid_items": self.tally.valid, "returned": self.tally.returned,
            "invalid": self.tally.invalid,
            "recall_at_10": (self.tally.scored > 0)
                .then(|| self.tally.recall / self.tally.scored as f64),
            "ndcg_at_10": (self.tally.scored > 0)
                .then(|| self.tally.ndcg / self.tally.scored as f64),
            "latency_p50_ms": quantile(&self.latencies_ms, 0.5),
            "latency_p99_ms": quantile(&self.latencies_ms, 0.99),
            "ttft_p50_ms": null, "ttft_p99_ms": null,
            "errors": self.errors, "first_error": self.first_error,
            "computed_tokens": self.prompt_tokens - self.cached_tokens,
            "prompt_tokens": self.prompt_tokens,
            "hit_rate": self.cached_tokens / self.prompt_tokens.max(1.0),
            "kv_bytes": self.kv_bytes,
            "max_share": self.per_replica.as_deref().map(max_share),
            // The engines' own request counts: a batched call's prompts count one each, as
            // vLLM's beam search counts one request per beam and step.
            "engine_requests_per_retrieval": (self.per_replica.as_deref())
                .filter(|_| ok > 0)
                .map(|r| r.iter().sum::<f64>() / ok as f64),
            "requests_per_replica": self.per_replica,
            "wall_s": self.wall_s,
        })
    }
}

/// The goals row: recache against the best peer at width [`GOAL_WIDTH`] only.
pub fn verdict(sums: &[Value]) -> Option<Value> {
    let at: Vec<Value> = (sums.iter())
        .filter(|r| r["beam_width"].as_u64() == Some(GOAL_WIDTH))
        .cloned()
        .collect();
    let mut v = report::verdict("retrieve", &at)?;
    v["beam_width"] = json!(GOAL_WIDTH);
    Some(v)
}

/// The summary rows as a table, on stderr.
pub fn table(sums: &[Value]) {
    eprintln!(
        "{:<14} {:>5} {:>13} {:>9} {:>11} {:>11} {:>7} {:>12}",
        "system", "width", "valid items/s", "invalid", "p50 ms", "p99 ms", "errors", "computed"
    );
    let f = crate::peers::report::cell;
    for r in sums.iter().filter(|r| r.get("goals").is_none()) {
        eprintln!(
            "{:<14} {:>5} {:>13} {:>9} {:>11} {:>11} {:>7} {:>12}",
            r["system"].as_str().unwrap_or("?"),
            f(r, "beam_width", 0),
            f(r, "valid_items_per_s", 2),
            f(r, "invalid_share", 3),
            f(r, "latency_p50_ms", 0),
            f(r, "latency_p99_ms", 0),
            f(r, "errors", 0),
            f(r, "computed_tokens", 0),
        );
    }
}

/// Each recache row's per-round paired ratios against vLLM's beam search without a gateway
/// (`vllm-direct`, one replica) at the same width, as `vs_direct`: `{field: {median, min,
/// max}}` for p50 latency, retrievals/s and computed tokens. Rounds pair by their number.
pub fn vs_direct(rows: &[Value], sums: &mut [Value]) {
    let at = |s: &str, w: u64, round: u64| {
        (rows.iter()).find(|r| r["system"] == s && r["beam_width"] == w && r["round"] == round)
    };
    for sum in sums.iter_mut() {
        let (Some(s), Some(w)) = (sum["system"].as_str(), sum["beam_width"].as_u64()) else {
            continue;
        };
        if !s.starts_with("recache") {
            continue;
        }
        let mut out = serde_json::Map::new();
        for f in ["latency_p50_ms", "rps", "computed_tokens"] {
            let ratios: Vec<f64> = (rows.iter())
                .filter(|r| r["system"] == s && r["beam_width"] == w)
                .filter_map(|r| {
                    let d = at("vllm-direct", w, r["round"].as_u64()?)?;
                    Some(r[f].as_f64()? / d[f].as_f64().filter(|x| *x > 0.0)?)
                })
                .collect();
            if !ratios.is_empty() {
                let sp = crate::stats::Spread::of(ratios);
                out.insert(
                    f.into(),
                    json!({"median": sp.median, "min": sp.min, "max": sp.max}),
                );
            }
        }
        if !out.is_empty() {
            sum["vs_direct"] = Value::Object(out);
        }
    }
}
