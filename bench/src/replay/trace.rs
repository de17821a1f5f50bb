//! The Mooncake-format trace `bench replay` and `bench route` send: each request's hash ids
//! ([`load_trace`]), and the prompt built from them ([`tokens`]): each hash id a fixed
//! [`BLOCK`]-token block seeded from the id (so shared prefixes stay shared), then one tail
//! token.

use crate::error::BenchError;

/// Tokens per hash id (the testbed engines' KV block).
pub const BLOCK: usize = crate::testbed::BLOCK_TOKENS as usize;

/// The tokens of one request: 32 per hash id, then one tail token.
pub fn tokens(ids: &[u64], tail: u64) -> Vec<u32> {
    let tok = |x: u64| 3 + (recache_hash::mix64(x) % 4000) as u32;
    let mut out: Vec<u32> = ids
        .iter()
        .flat_map(|&h| (0..BLOCK as u64).map(move |j| tok(h.wrapping_mul(64) + j)))
        .collect();
    out.push(tok(tail ^ 0xdead_beef));
    out
}

/// The first `requests` requests' hash ids of a Mooncake-format trace, each cut to what fits
/// in `max_model_len` as [`tokens`] builds prompts.
pub fn load_trace(
    trace: &std::path::Path,
    requests: usize,
    max_model_len: usize,
) -> Result<Vec<Vec<u64>>, BenchError> {
    let text = std::fs::read_to_string(trace).map_err(BenchError::io("reading trace"))?;
    // Room for the tail token and the one generated token.
    let max_ids = (max_model_len.saturating_sub(2)) / BLOCK;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .take(requests)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l)
                .map_err(|e| BenchError::Setup(format!("trace line: {e}")))?;
            let ids = v["hash_ids"]
                .as_array()
                .ok_or_else(|| BenchError::Setup("trace line without hash_ids".into()))?;
            Ok(ids
                .iter()
                .filter_map(|x| x.as_u64())
                .take(max_ids)
                .collect())
        })
        .collect()
}
