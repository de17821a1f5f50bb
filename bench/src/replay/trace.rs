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

/// What `bench replay --shadow-segments` knows of each request of a GR trace (one with
/// `segments`: `gen_trace ml100k`, `gen_trace gr`, `bench gr --trace-out`).
pub struct GrContext {
    /// Tokens of each request's live prefix: its leading segments that name an entity (a
    /// user's profile, pooled items), what `/v1/rank` hands recache's shadow of the prompts it
    /// writes; the rest (candidates, instruction) is unique to the request.
    pub keep_tokens: Vec<usize>,
    /// Each block's entity context, so the simulator's GR policies (dead-first) see the same.
    pub entities: Vec<Vec<recache_eviction::policy::EntityCtx>>,
}

/// The [`GrContext`] of the requests [`load_trace`] reads from the same file (cut the same
/// way); an error naming the request when one has no segments.
pub fn load_gr(
    trace: &std::path::Path,
    requests: usize,
    max_model_len: usize,
) -> Result<GrContext, BenchError> {
    use recache_eviction::trace::SegmentKind;
    let all = recache_eviction::trace::load_mooncake(trace)
        .map_err(|e| BenchError::Setup(format!("--shadow-segments: {e}")))?;
    let max_ids = (max_model_len.saturating_sub(2)) / BLOCK;
    let mut out = GrContext {
        keep_tokens: Vec::new(),
        entities: Vec::new(),
    };
    for (i, r) in all.iter().take(requests).enumerate() {
        let segs = r.segments.as_ref().ok_or_else(|| {
            BenchError::Setup(format!(
                "--shadow-segments: request {i} of {} has no segments (a GR trace has them: gen_trace ml100k or gr)",
                trace.display()
            ))
        })?;
        let live: usize = segs
            .iter()
            .take_while(|s| {
                s.entity.is_some() && matches!(s.kind, SegmentKind::User | SegmentKind::Item)
            })
            .map(|s| s.len)
            .sum();
        out.keep_tokens.push(live.min(max_ids) * BLOCK);
        let mut ents = r.entities();
        ents.truncate(max_ids);
        out.entities.push(ents);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn trace(lines: &[&str]) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        for l in lines {
            writeln!(f, "{l}").expect("write");
        }
        f
    }

    #[test]
    fn the_live_prefix_is_the_leading_entity_segments() {
        // user profile (2 blocks) + two pooled items + candidates + instruction.
        let f = trace(&[
            r#"{"hash_ids":[1,2,3,4,5,6,7],"segments":[
                {"len":2,"kind":"user","entity":9},
                {"len":1,"kind":"item","entity":4,"root":true},
                {"len":1,"kind":"item","entity":5,"root":true},
                {"len":2,"kind":"items"},{"len":1,"kind":"other"}]}"#
                .replace('\n', "")
                .as_str(),
            r#"{"hash_ids":[8,9],"segments":[{"len":1,"kind":"other"},{"len":1,"kind":"user","entity":3}]}"#,
        ]);
        let gr = load_gr(f.path(), 10, 100 * BLOCK).expect("loads");
        assert_eq!(
            gr.keep_tokens,
            vec![4 * BLOCK, 0],
            "user + 2 items, then none"
        );
        assert_eq!(gr.entities[0].len(), 7, "one context per block");
        // Cut like load_trace: a short model keeps only the blocks that fit.
        let cut = load_gr(f.path(), 1, 3 * BLOCK + 2).expect("loads");
        assert_eq!(cut.keep_tokens, vec![3 * BLOCK]);
        assert_eq!(cut.entities[0].len(), 3);
    }

    #[test]
    fn a_request_without_segments_is_named() {
        let f = trace(&[r#"{"hash_ids":[1,2]}"#]);
        let err = load_gr(f.path(), 10, 100 * BLOCK).err().expect("an error");
        assert!(err.to_string().contains("request 0"), "{err}");
    }
}
