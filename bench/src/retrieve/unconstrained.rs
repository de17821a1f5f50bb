//! The baseline the constraint exists for: beam search over the engine's own top tokens at
//! every step, no trie, for as many steps as the deepest code; its top-k codes are then
//! post-filtered against the catalog. A code counts as an item when one of its prefixes is an
//! item's whole code (a generated disambiguation token past a unique code is ignored).

use serde_json::json;

use crate::error::BenchError;
use crate::http;
use crate::http::HttpClient;
use recache::harness::RetrieveIndex;

/// vLLM's default `max_logprobs`: the most top tokens one call returns.
pub const MAX_FANOUT: usize = 20;

pub struct Outcome {
    pub invalid_rate: f64,
    /// Mean recall@10 of the post-filtered codes against `targets` (None without targets).
    pub recall_at_10: Option<f64>,
    pub computed_tokens: f64,
    pub fanout: usize,
}

#[allow(clippy::too_many_arguments)]
pub async fn run(
    client: &HttpClient,
    upstream: &str,
    model: &str,
    prompts: &[Vec<u32>],
    targets: &[Option<String>],
    index: &RetrieveIndex,
    width: usize,
    top_k: usize,
) -> Result<Outcome, BenchError> {
    let fanout = width.min(MAX_FANOUT);
    let url = format!("{upstream}/v1/completions");
    let (mut invalid, mut returned, mut computed) = (0usize, 0usize, 0.0);
    let (mut hits, mut scored) = (0.0, 0usize);
    let progress = crate::progress::Progress::new(
        prompts.len() as u64,
        format!("unconstrained width {width}"),
    );
    for (n, prompt) in prompts.iter().enumerate() {
        let mut beams: Vec<(Vec<u32>, f64)> = vec![(Vec::new(), 0.0)];
        for _ in 0..index.depth {
            let calls = beams.iter().map(|(code, _)| {
                let tokens: Vec<u32> = prompt.iter().chain(code).copied().collect();
                let body = json!({"model": model, "prompt": tokens, "max_tokens": 1,
                    "temperature": 0, "logprobs": fanout, "return_tokens_as_token_ids": true});
                let url = url.clone();
                async move { http::post(client, &url, &body).await }
            });
            let answers = recache::harness::join_all(calls).await;
            let mut next = Vec::new();
            for ((code, score), answer) in beams.iter().zip(answers) {
                let (status, v) = answer?;
                if status != 200 {
                    return Err(BenchError::Setup(format!(
                        "unconstrained step: engine answered {status}: {v}"
                    )));
                }
                let usage = &v["usage"];
                computed += usage["prompt_tokens"].as_f64().unwrap_or(0.0)
                    - usage["prompt_tokens_details"]["cached_tokens"]
                        .as_f64()
                        .unwrap_or(0.0);
                for (t, lp) in top_logprobs(&v) {
                    let mut c = code.clone();
                    c.push(t);
                    next.push((c, score + lp));
                }
            }
            next.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            next.truncate(width);
            beams = next;
        }
        for (code, _) in beams.iter().take(top_k) {
            returned += 1;
            invalid += !is_item(index, code) as usize;
        }
        if let Some(Some(t)) = targets.get(n) {
            let items: Vec<Option<String>> = (beams.iter().take(top_k))
                .map(|(c, _)| item_of(index, c))
                .collect();
            hits += super::codes::hit(&items, t).0;
            scored += 1;
        }
        progress.inc(1);
    }
    progress.finish();
    Ok(Outcome {
        invalid_rate: invalid as f64 / returned.max(1) as f64,
        recall_at_10: (scored > 0).then(|| hits / scored as f64),
        computed_tokens: computed / prompts.len().max(1) as f64,
        fanout,
    })
}

/// Whether a prefix of `code` is an item's whole code.
pub fn is_item(index: &RetrieveIndex, code: &[u32]) -> bool {
    let mut node = 0i32;
    for &t in code {
        let (toks, kids) = index.trie.children(node);
        match toks.binary_search(&(t as i32)) {
            Ok(i) => node = kids[i],
            Err(_) => return false,
        }
        if index.leaf_item.contains_key(&node) {
            return true;
        }
    }
    false
}

/// The item a prefix of `code` is the whole code of.
fn item_of(index: &RetrieveIndex, code: &[u32]) -> Option<String> {
    let mut node = 0i32;
    for &t in code {
        let (toks, kids) = index.trie.children(node);
        node = kids[toks.binary_search(&(t as i32)).ok()?];
        if let Some(&pos) = index.leaf_item.get(&node) {
            return Some(index.file.items[pos].id.clone());
        }
    }
    None
}

/// `Value` helper for the unconstrained search's answers.
fn top_logprobs(answer: &serde_json::Value) -> Vec<(u32, f64)> {
    let Some(map) = answer["choices"][0]["logprobs"]["top_logprobs"][0].as_object() else {
        return Vec::new();
    };
    map.iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("token_id:")?.parse().ok()?, v.as_f64()?)))
        .collect()
}
