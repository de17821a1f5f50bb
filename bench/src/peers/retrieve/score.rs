//! The retrieve workload's pure parts: which returned code is a catalog item (`bench
//! retrieve`'s rule for its unconstrained baseline: a code counts as an item when one of its
//! prefixes is an item's whole code, so a token generated past a complete code is ignored),
//! what one answer returned (recache's item ids, or a peer's beam-search sequences as token
//! ids), the tally over a run and the row of one system × width × round.

use recache::harness::RetrieveIndex;
use serde_json::{Value, json};

use crate::peers::replicas::max_share;
use crate::stats::quantile;

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
    let choices = (answer["choices"].as_array()).ok_or_else(|| format!("no choices in {answer}"))?;
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
            "latency_p50_ms": quantile(&self.latencies_ms, 0.5),
            "latency_p99_ms": quantile(&self.latencies_ms, 0.99),
            "ttft_p50_ms": null, "ttft_p99_ms": null,
            "errors": self.errors, "first_error": self.first_error,
            "computed_tokens": self.prompt_tokens - self.cached_tokens,
            "prompt_tokens": self.prompt_tokens,
            "hit_rate": self.cached_tokens / self.prompt_tokens.max(1.0),
            "kv_bytes": self.kv_bytes,
            "max_share": self.per_replica.as_deref().map(max_share),
            "requests_per_replica": self.per_replica,
            "wall_s": self.wall_s,
        })
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// 4 items: two of 2 tokens, two sharing (10, 21) told apart by a third token.
    pub fn index() -> RetrieveIndex {
        let file = json!({"format": 1, "method": "test", "levels": 2, "codebook": 4,
            "seed": 0, "token_base": 10, "items": [
                {"id": "a", "code": [10, 20]}, {"id": "b", "code": [11, 20]},
                {"id": "c", "code": [10, 21, 30]}, {"id": "d", "code": [10, 21, 31]}]});
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("index.json");
        std::fs::write(&path, file.to_string()).expect("write");
        RetrieveIndex::load(&path).expect("a valid index")
    }

    #[test]
    fn a_code_is_an_item_when_a_prefix_is_a_whole_code() {
        let ix = index();
        assert_eq!(item_of(&ix, &[10, 20]), Some("a"));
        // A token generated past a complete code is ignored.
        assert_eq!(item_of(&ix, &[11, 20, 99]), Some("b"));
        assert_eq!(item_of(&ix, &[10, 21, 31]), Some("d"));
        // Too short, off the trie, or not starting at the root.
        assert_eq!(item_of(&ix, &[10, 21]), None);
        assert_eq!(item_of(&ix, &[12, 20]), None);
        assert_eq!(item_of(&ix, &[20, 10, 20]), None);
        assert_eq!(item_of(&ix, &[]), None);
    }

    #[test]
    fn peer_answers_are_read_best_first_and_filtered() {
        let ix = index();
        let answer = json!({"choices": [
            {"index": 2, "token_ids": [10, 21, 30]},
            {"index": 0, "token_ids": [10, 20, 5]},
            {"index": 1, "token_ids": [7, 7, 7]},
            {"index": 3, "token_ids": [11, 20, 1]}]});
        let got = peer_items(&ix, &answer, 3).expect("readable");
        assert_eq!(got, vec![Some("a".into()), None, Some("c".into())]);
        let no_ids = json!({"choices": [{"index": 0, "text": "x"}]});
        let err = peer_items(&ix, &no_ids, 3).expect_err("no token ids");
        assert!(err.contains("return_token_ids"), "{err}");
    }

    #[test]
    fn recache_answers_are_checked_against_the_index() {
        let ix = index();
        let answer = json!({"items": [{"id": "d"}, {"id": "zz"}, {"id": "a"}]});
        let got = recache_items(&ix, &answer, 10).expect("readable");
        assert_eq!(got, vec![Some("d".into()), None, Some("a".into())]);
        assert!(recache_items(&ix, &json!({"error": "x"}), 10).is_err());
    }

    #[test]
    fn the_tally_counts_distinct_valid_items_and_the_invalid_share() {
        let mut t = Tally::default();
        t.add(&[Some("a".into()), Some("a".into()), None, Some("b".into())]);
        t.add(&[None, None]);
        assert_eq!((t.retrievals, t.returned, t.invalid, t.valid), (2, 6, 3, 2));
        assert_eq!(t.invalid_share(), Some(0.5));
        assert_eq!(Tally::default().invalid_share(), None);
    }

    #[test]
    fn a_row_has_every_field() {
        let mut tally = Tally::default();
        tally.add(&[Some("a".into()), None]);
        let run = Run {
            system: "recache",
            round: 1,
            beam_width: 32,
            top_k: 10,
            requests: 2,
            tally,
            latencies_ms: vec![30.0, 10.0],
            errors: 1,
            wall_s: 2.0,
            prompt_tokens: 100.0,
            cached_tokens: 60.0,
            kv_bytes: 7,
            ..Default::default()
        };
        let row = run.row();
        for f in [
            "system",
            "workload",
            "rps",
            "errors",
            "computed_tokens",
            "kv_bytes",
            "valid_items_per_s",
            "invalid_share",
            "beam_width",
            "latency_p50_ms",
            "latency_p99_ms",
        ] {
            assert!(row.get(f).is_some(), "{f} missing: {row}");
        }
        assert_eq!(row["valid_items_per_s"], 0.5);
        assert_eq!(row["invalid_share"], 0.5);
        assert_eq!(row["computed_tokens"], 40.0);
        assert_eq!(row["latency_p99_ms"], 30.0);
        assert_eq!(row["rps"], 0.5);
    }
}
