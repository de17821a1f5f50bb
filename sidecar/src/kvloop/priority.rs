//! Eviction steering through SGLang's request `priority` (`--sglang-priority`), no engine
//! patch: with `--radix-eviction-policy priority` SGLang evicts the radix leaves of the
//! lowest priority first (LRU among equals), where a node's priority is the highest of the
//! requests that inserted or reused it. recache sets every forwarded request's `priority`
//! from the active policy's view of its prompt, so what the policy keeps SGLang keeps.
//!
//! The mapping, `epoch * LEVELS + level`:
//! - `level`: how many leading full blocks of the prompt the shadow cache (the active policy
//!   at the engine's capacity) holds right now, i.e. how much of this prefix the policy chose
//!   to keep, on a log scale (bit length of the count: 0, 1, 2-3, 4-7, ... blocks; capped at
//!   `LEVELS - 1`) so it means the same at SGLang's token granularity and at 32-token blocks;
//!   0 for prompts recache cannot see as token ids.
//! - `epoch`: blocks the shadow has admitted so far / its capacity (one epoch = one cache's
//!   worth of new blocks). SGLang only ever raises a node's priority, so without it a prefix
//!   that was kept once would outrank every newer one for good; with it, a node older than
//!   a cache turnover yields to anything newer, and within an epoch the policy's level decides.
//!
//! The request path does one lock-free load ([`ArcSwap`]) and one hash per prompt block; the
//! engine-loop worker rebuilds the view after arrivals. Bodies are rewritten only when the
//! flag is on.

use std::collections::HashSet;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use serde_json::Value;

/// Priority levels per epoch (a level is the bit length of the kept leading blocks, capped).
pub const LEVELS: u64 = 16;

/// SGLang's native generation route (token ids in `input_ids`).
pub const GENERATE: &str = recache_adapters::sglang::GENERATE_PATH;

/// Routes whose JSON bodies get a `priority` (SGLang's native and OpenAI generation routes).
pub const STEERED_PATHS: [&str; 3] = [GENERATE, "/v1/completions", "/v1/chat/completions"];

/// What the policy holds, as the request path reads it.
#[derive(Debug, Default)]
pub struct View {
    /// Content ids of the blocks in the shadow cache.
    pub kept: HashSet<u64>,
    /// Cache turnovers so far.
    pub epoch: u64,
}

/// Shared between the worker (writes) and the proxy (reads).
pub struct PrioritySource {
    view: ArcSwap<View>,
    block_size: usize,
}

impl PrioritySource {
    pub fn new(block_size: usize) -> Arc<Self> {
        Arc::new(Self {
            view: ArcSwap::from_pointee(View::default()),
            block_size: block_size.max(1),
        })
    }

    /// Publishes a new view (worker thread).
    pub fn publish(&self, view: View) {
        self.view.store(Arc::new(view));
    }

    /// The priority of a request with these token-id prompts (the highest over them).
    pub fn priority(&self, prompts: &[Vec<u32>]) -> i64 {
        let view = self.view.load();
        let kept = prompts
            .iter()
            .map(|t| kept_prefix(&view.kept, &super::blocks::prompt_ids(t, self.block_size)))
            .max()
            .unwrap_or(0);
        mapping(view.epoch, kept)
    }

    /// The body to forward: `body` with `priority` set, or None to forward it unchanged (a
    /// route that is not steered, or a body that is not a JSON object).
    pub fn steer(&self, path: &str, body: &[u8]) -> Option<Bytes> {
        if !STEERED_PATHS.contains(&path) {
            return None;
        }
        let mut value: Value = serde_json::from_slice(body).ok()?;
        let obj = value.as_object_mut()?;
        let field = if path == GENERATE {
            "input_ids"
        } else {
            "prompt"
        };
        let prompts = obj.get(field).map(token_prompts).unwrap_or_default();
        obj.insert("priority".into(), Value::from(self.priority(&prompts)));
        serde_json::to_vec(&value).ok().map(Bytes::from)
    }
}

/// Leading blocks of `ids` held in `kept`.
pub fn kept_prefix(kept: &HashSet<u64>, ids: &[u64]) -> usize {
    ids.iter().take_while(|id| kept.contains(id)).count()
}

/// `epoch * LEVELS + level(kept)`, saturating (SGLang takes a signed 64-bit int).
pub fn mapping(epoch: u64, kept: usize) -> i64 {
    let level = u64::from(usize::BITS - kept.leading_zeros()).min(LEVELS - 1);
    let p = epoch.saturating_mul(LEVELS).saturating_add(level);
    i64::try_from(p).unwrap_or(i64::MAX)
}

/// Token-id prompts in a `prompt` / `input_ids` value: one list of ids or a batch of them;
/// text gives none.
pub fn token_prompts(v: &Value) -> Vec<Vec<u32>> {
    let ids = |v: &Value| -> Option<Vec<u32>> {
        v.as_array()?
            .iter()
            .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
            .collect()
    };
    match v.as_array() {
        Some(items) if items.iter().all(Value::is_array) => items.iter().filter_map(ids).collect(),
        Some(_) => ids(v).into_iter().collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source_keeping(tokens: &[u32], epoch: u64) -> Arc<PrioritySource> {
        let s = PrioritySource::new(4);
        let kept = super::super::blocks::prompt_ids(tokens, 4)
            .into_iter()
            .collect();
        s.publish(View { kept, epoch });
        s
    }

    #[test]
    fn mapping_orders_epochs_before_levels_and_caps_levels() {
        assert_eq!(mapping(0, 0), 0);
        assert_eq!(mapping(0, 1), 1);
        assert_eq!((mapping(0, 2), mapping(0, 3), mapping(0, 4)), (2, 2, 3));
        assert_eq!(mapping(0, 1000), 10);
        assert_eq!(mapping(0, usize::MAX), 15);
        assert_eq!(mapping(1, 0), 16);
        assert!(mapping(1, 0) > mapping(0, usize::MAX));
        assert_eq!(mapping(u64::MAX, 5), i64::MAX);
    }

    #[test]
    fn priority_counts_the_kept_leading_blocks() {
        let hot: Vec<u32> = (0..12).collect();
        let s = source_keeping(&hot, 2);
        assert_eq!(s.priority(std::slice::from_ref(&hot)), 2 * 16 + 2); // 3 kept blocks: level 2
        let mut other = hot.clone();
        other[5] = 999; // second block differs: only the first is kept
        assert_eq!(s.priority(&[other.clone()]), 2 * 16 + 1);
        assert_eq!(s.priority(&[vec![7; 12]]), 2 * 16);
        assert_eq!(s.priority(&[other, hot]), 2 * 16 + 2); // a batch: the highest
        assert_eq!(s.priority(&[]), 2 * 16);
    }

    #[test]
    fn steer_sets_priority_on_generation_routes_only() {
        let hot: Vec<u32> = (0..8).collect();
        let s = source_keeping(&hot, 0);
        let body = br#"{"input_ids":[0,1,2,3,4,5,6,7],"sampling_params":{"max_new_tokens":1},"priority":-4}"#;
        let out: Value =
            serde_json::from_slice(&s.steer("/generate", body).expect("rewritten")).expect("json");
        assert_eq!(out["priority"], 2);
        assert_eq!(out["sampling_params"]["max_new_tokens"], 1);
        assert_eq!(out["input_ids"][7], 7);
        let body = br#"{"model":"m","prompt":[[0,1,2,3],[9,9,9,9]]}"#;
        let out: Value =
            serde_json::from_slice(&s.steer("/v1/completions", body).expect("rewritten"))
                .expect("json");
        assert_eq!(out["priority"], 1);
        let body = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let out: Value =
            serde_json::from_slice(&s.steer("/v1/chat/completions", body).expect("rewritten"))
                .expect("json");
        assert_eq!(out["priority"], 0); // text: level 0, the epoch still counts
        assert!(s.steer("/v1/models", b"{}").is_none());
        assert!(s.steer("/generate", b"[1,2]").is_none());
        assert!(s.steer("/generate", b"{").is_none());
    }

    #[test]
    fn token_prompts_reads_ids_and_batches_and_skips_text() {
        let v = |s: &str| serde_json::from_str::<Value>(s).expect("json");
        assert_eq!(token_prompts(&v("[1,2]")), vec![vec![1, 2]]);
        assert_eq!(token_prompts(&v("[[1],[2,3]]")).len(), 2);
        assert!(token_prompts(&v(r#""text""#)).is_empty());
        assert!(token_prompts(&v(r#"["a","b"]"#)).is_empty());
        assert!(token_prompts(&v("[-1]")).is_empty());
    }
}
