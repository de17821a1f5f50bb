//! vLLM's scoring bodies and answers, single and batched.

use serde_json::json;

use super::*;

fn choice(index: u64, lps: &[(u32, f64)]) -> Value {
    let map: serde_json::Map<String, Value> = lps
        .iter()
        .map(|(t, lp)| (format!("token_id:{t}"), json!(lp)))
        .collect();
    json!({"index": index, "text": "token_id:0", "logprobs": {"top_logprobs": [map]}})
}

#[test]
fn a_batch_is_one_call_with_the_union_of_labels() {
    let prompts = vec![vec![1, 2, 3], vec![1, 2, 4]];
    let labels = vec![vec![302, 300], vec![300, 301]];
    let body = score_batch_body(&ScoreBatch {
        model: Some("m"),
        prompts: &prompts,
        labels: &labels,
    });
    assert_eq!(body["prompt"], json!([[1, 2, 3], [1, 2, 4]]));
    assert_eq!(body["logprob_token_ids"], json!([300, 301, 302]));
    assert!(body.get("allowed_token_ids").is_none(), "{body}");
    assert_eq!(
        (body["model"].clone(), body["max_tokens"].clone()),
        (json!("m"), json!(1))
    );
}

#[test]
fn a_batch_answer_is_read_by_choice_index() {
    let labels = vec![vec![302, 300], vec![301]];
    // Choices out of order: each is placed by its index.
    let answer = json!({
        "choices": [choice(1, &[(300, -1.0), (301, -2.0), (302, -3.0)]),
                    choice(0, &[(300, -4.0), (301, -5.0), (302, -6.0)])],
        "usage": {"prompt_tokens": 20, "prompt_tokens_details": {"cached_tokens": 8}},
    });
    let a = read_score_batch(&answer, &labels).expect("batch");
    assert_eq!(a.logprobs, vec![vec![-6.0, -4.0], vec![-2.0]]);
    assert_eq!((a.prompt_tokens, a.cached_tokens), (20, 8));
    // A missing choice or label is an error, never a silent gap.
    let short = json!({"choices": [choice(0, &[(300, -1.0), (302, -1.0)])]});
    assert!(matches!(
        read_score_batch(&short, &labels),
        Err(ScoreError::Shape(_))
    ));
    let gap = json!({"choices": [choice(0, &[(300, -1.0)]), choice(1, &[(301, -1.0)])]});
    assert_eq!(
        read_score_batch(&gap, &labels),
        Err(ScoreError::MissingLabel(302))
    );
}

#[test]
fn a_single_answer_reads_as_before() {
    let answer = json!({"choices": [choice(0, &[(7, -0.5)])], "usage": {"prompt_tokens": 3}});
    let s = read_score(&answer, &[7]).expect("score");
    assert_eq!(
        (s.logprobs, s.prompt_tokens, s.cached_tokens),
        (vec![-0.5], 3, 0)
    );
    assert!(matches!(
        read_score(&json!({}), &[7]),
        Err(ScoreError::Shape(_))
    ));
}
