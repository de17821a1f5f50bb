//! Unit tests of `rank::engine`.

use super::*;
use serde_json::json;

#[test]
fn reads_every_label_and_usage() {
    let prompt = Prompt {
        tokens: vec![1, 2],
        labels: vec![(300, 1), (301, 0)],
    };
    let answer = json!({"choices": [{"logprobs": {"top_logprobs": [
        {"token_id:301": -1.5, "token_id:300": -0.5}]}}],
        "usage": {"prompt_tokens": 2, "prompt_tokens_details": {"cached_tokens": 1}}});
    let s = read_scores(Engine::Vllm, &answer, &prompt).expect("scores");
    assert_eq!(s.logprobs, vec![-0.5, -1.5]);
    assert_eq!((s.prompt_tokens, s.cached_tokens), (2, 1));
    let missing = json!({"choices": [{"logprobs": {"top_logprobs": [{"token_id:300": -0.5}]}}]});
    let e = read_scores(Engine::Vllm, &missing, &prompt).expect_err("missing label");
    assert!(e.to_string().contains("label token 301"), "{e}");
    let (path, body) = scoring_request(Engine::Vllm, Some("m"), &prompt, Some("s"));
    assert_eq!(path, "/v1/completions");
    assert_eq!(body["logprob_token_ids"], json!([300, 301]));
    assert_eq!(body["cache_salt"], "s");
}
