//! The pure parts of the `gr` workload's requests: candidates shuffled once per request (the
//! planners put the held-out item first, and a label-position bias must not read as
//! quality), the user-first token prompt a team would send a peer (recache's UP layout:
//! `[U] [L_0 I_0] [L_1 I_1] ... [instr]`, labels `base + k`), the vLLM scoring body recache
//! itself sends (`Engine::score_body`: the labels' log-probabilities) with that prompt as
//! text, and where the held-out item landed in either answer.

use serde_json::{Value, json};

use crate::quality::metrics::rank_by;
use crate::rng::Rng;
use recache_adapters::Engine;
use recache_adapters::scoring::ScoreRequest;

/// Shuffles a `/v1/rank` body's candidates in place (seeded by `seed`); returns the held-out
/// item's id (the planners' first candidate), or None when the body has no candidates.
pub fn shuffle_candidates(body: &mut Value, seed: u64) -> Option<Value> {
    let items = body["items"].as_array_mut()?;
    let target = items.first()?["id"].clone();
    Rng::new(seed).shuffle(items);
    Some(target)
}

fn ids(v: &Value) -> Vec<u32> {
    (v.as_array().into_iter().flatten())
        .filter_map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
        .collect()
}

/// The user-first prompt of a `/v1/rank` body with token ids: profile, each candidate in
/// request order after its label `label_base + k`, then `instruction`; and the labels.
pub fn user_first(body: &Value, instruction: &[u32], label_base: u32) -> (Vec<u32>, Vec<u32>) {
    let mut tokens = ids(&body["user"]["tokens"]);
    let mut labels = Vec::new();
    for (k, item) in body["items"].as_array().into_iter().flatten().enumerate() {
        let label = label_base + k as u32;
        labels.push(label);
        tokens.push(label);
        tokens.extend(ids(&item["tokens"]));
    }
    tokens.extend_from_slice(instruction);
    (tokens, labels)
}

/// The scoring request recache sends `engine`, with `text` as the prompt (what a peer
/// routes): vLLM's completions body with `prompt`, SGLang's `/generate` body with `text`.
pub fn peer_body(engine: Engine, model: &str, text: &str, labels: &[u32]) -> Value {
    let mut body = engine.score_body(&ScoreRequest {
        model: Some(model),
        tokens: &[],
        labels,
        cache_salt: None,
    });
    match engine {
        Engine::Vllm => body["prompt"] = json!(text),
        Engine::Sglang => {
            if let Some(b) = body.as_object_mut() {
                b.remove("input_ids");
            }
            body["text"] = json!(text);
        }
    }
    body
}

/// 1-based rank of the held-out item in a peer's answer: candidates (request order) by their
/// labels' log-probabilities. Err: the answer lacks them (the request is not answered).
pub fn peer_rank(
    engine: Engine,
    answer: &Value,
    labels: &[u32],
    target_pos: usize,
) -> Result<usize, String> {
    let scores = engine
        .read_score(answer, labels)
        .map_err(|e| e.to_string())?
        .logprobs;
    let order: Vec<usize> = (0..scores.len()).collect();
    Ok(rank_by(&order, &target_pos, |&k| scores[k]))
}

/// 1-based rank of `target` in a `/v1/rank` answer (the bodies ask for `top_k` 10: a target
/// outside the answer ranks below every candidate, a miss at any k ≤ 10). Err: no ranking.
pub fn rank_answer_rank(
    answer: &Value,
    target: &Value,
    candidates: usize,
) -> Result<usize, String> {
    let ranking = (answer["ranking"].as_array())
        .filter(|r| !r.is_empty() && r.len() <= candidates)
        .ok_or_else(|| {
            format!(
                "no ranking of the candidates in the answer: {}",
                short(answer)
            )
        })?;
    Ok(ranking
        .iter()
        .position(|r| r["id"] == *target)
        .map_or(candidates + 1, |p| p + 1))
}

/// The start of an answer, for an error message.
pub fn short(v: &Value) -> String {
    v.to_string().chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body() -> Value {
        json!({"model": "m", "user": {"id": 1, "tokens": [1, 2, 3]},
               "items": [{"id": 9, "tokens": [90, 91]}, {"id": 7, "tokens": [70]},
                         {"id": 5, "tokens": [50, 51, 52]}], "top_k": 10})
    }

    #[test]
    fn user_first_puts_the_profile_then_labelled_items_then_the_instruction() {
        let (tokens, labels) = user_first(&body(), &[8, 8], 256);
        assert_eq!(
            tokens,
            [1, 2, 3, 256, 90, 91, 257, 70, 258, 50, 51, 52, 8, 8]
        );
        assert_eq!(labels, [256, 257, 258]);
    }

    #[test]
    fn shuffling_keeps_every_candidate_and_names_the_held_out_one() {
        let mut b = body();
        let target = shuffle_candidates(&mut b, 3).expect("items");
        assert_eq!(target, json!(9));
        let mut got: Vec<u64> = (b["items"].as_array().expect("items").iter())
            .filter_map(|i| i["id"].as_u64())
            .collect();
        got.sort_unstable();
        assert_eq!(got, [5, 7, 9]);
        assert!(shuffle_candidates(&mut json!({"items": []}), 1).is_none());
    }

    #[test]
    fn the_peer_body_is_recaches_scoring_request_with_text() {
        let b = peer_body(Engine::Vllm, "m", "hello", &[256, 257]);
        assert_eq!(b["prompt"], "hello");
        assert_eq!(b["logprob_token_ids"], json!([256, 257]));
        assert_eq!(b["allowed_token_ids"], json!([256, 257]));
        assert_eq!(
            (b["max_tokens"].clone(), b["logprobs"].clone()),
            (json!(1), json!(1))
        );
        assert_eq!(b["return_tokens_as_token_ids"], true);
        assert_eq!(b["model"], "m");
        let s = peer_body(Engine::Sglang, "m", "hello", &[256, 257]);
        assert_eq!(
            (s["text"].as_str(), s.get("input_ids")),
            (Some("hello"), None)
        );
        assert_eq!(s["token_ids_logprob"], json!([256, 257]));
        assert_eq!(Engine::Sglang.scoring_path(), "/generate");
    }

    #[test]
    fn ranks_from_either_answer() {
        let answer = json!({"choices": [{"logprobs": {"top_logprobs": [
            {"token_id:256": -3.0, "token_id:257": -1.0, "token_id:258": -2.0}]}}]});
        // Candidate 2 (label 258) is second best.
        assert_eq!(peer_rank(Engine::Vllm, &answer, &[256, 257, 258], 2), Ok(2));
        assert!(peer_rank(Engine::Vllm, &json!({"choices": []}), &[256], 0).is_err());
        let sglang = json!({"meta_info": {"prompt_tokens": 9, "output_token_ids_logprobs": [[
            [-3.0, 256, null], [-1.0, 257, null], [-2.0, 258, null]]]}});
        assert_eq!(
            peer_rank(Engine::Sglang, &sglang, &[256, 257, 258], 2),
            Ok(2)
        );
        let ranked = json!({"ranking": [{"id": 7}, {"id": 9}, {"id": 5}]});
        assert_eq!(rank_answer_rank(&ranked, &json!(9), 3), Ok(2));
        // top_k: the target left out ranks below every candidate.
        assert_eq!(rank_answer_rank(&ranked, &json!(1), 100), Ok(101));
        assert!(
            rank_answer_rank(&ranked, &json!(9), 2).is_err(),
            "more than asked"
        );
        assert!(rank_answer_rank(&json!({"ranking": []}), &json!(9), 3).is_err());
        assert!(rank_answer_rank(&json!({"error": {}}), &json!(9), 3).is_err());
    }
}
