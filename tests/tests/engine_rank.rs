//! `/v1/rank` and the `recache_rank` completions extension against the real vLLM and SGLang
//! testbeds (SGLang: `recache serve --engine sglang`, scoring through `/generate` with
//! `token_ids_logprob`): every candidate scored with its id mapped back, the UP/IP layout
//! reported, cached tokens on a repeated request (SGLang: the whole prompt but its last token,
//! same scores), `readout: item` scoring the candidates' own first tokens, 400s for invalid
//! requests, and `--rank-item-pool` in front of an engine without the pool (`/ready` says it
//! is missing; ranking still answers). One body, run once per engine.

use std::collections::BTreeSet;

use recache_integration::{Engine, Proxy};
use serde_json::{Value, json};

async fn post(url: String, body: &Value) -> (u16, Value, reqwest::header::HeaderMap) {
    let resp = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, resp.json().await.expect("json body"), headers)
}

fn request(model: &str, n: usize, mode: &str) -> Value {
    let profile = (0..200)
        .map(|i| format!("bought item {i} lipstick shade {}", i % 7))
        .collect::<Vec<_>>()
        .join(", ");
    // Mixed id types and both text and token items.
    let items: Vec<Value> = (0..n)
        .map(|i| match i % 3 {
            0 => json!({"id": i, "text": format!("Product {i}: a moisturising cream, 50 ml")}),
            1 => json!({"id": format!("sku-{i}"), "text": format!("Nail polish number {i}")}),
            _ => json!({"id": format!("t{i}"), "tokens": [300 + i as u32, 301, 302]}),
        })
        .collect();
    json!({"model": model, "user": {"id": "user-1", "text": profile}, "items": items, "mode": mode})
}

fn ids(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x["id"].to_string())
        .collect()
}

async fn rank_scores_every_candidate(engine: Engine) {
    let tb = engine.testbed("rank", &[]);
    let proxy = Proxy::start_with(&engine.serve_args(&[&tb.upstream])).await;
    let url = proxy.url("/v1/rank");
    for (mode, prefix) in [("user_prefix", "user"), ("item_prefix", "item")] {
        let req = request(&tb.model, 60, mode);
        let (status, v, _) = post(url.clone(), &req).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["prefix"], prefix);
        let ranking = v["ranking"].as_array().expect("ranking");
        assert_eq!(ranking.len(), 60);
        assert_eq!(
            ids(&v["ranking"]),
            ids(&req["items"]),
            "ids map back exactly"
        );
        let scores: Vec<f64> = ranking
            .iter()
            .map(|r| r["score"].as_f64().expect("score"))
            .collect();
        assert!(
            scores.iter().all(|s| s.is_finite() && *s <= 0.0),
            "{scores:?}"
        );
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "sorted best first");
        assert!(v["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens") > 1000);
    }
    // The same UP request again: the prompt is served from the engine's cache.
    match engine {
        // vLLM's prefix cache holds the user profile: some tokens are cached.
        Engine::Vllm => {
            let (status, v, _) = post(url.clone(), &request(&tb.model, 60, "user_prefix")).await;
            assert_eq!(status, 200, "{v}");
            assert!(
                v["usage"]["cached_tokens"].as_u64().expect("cached") > 0,
                "{v}"
            );
        }
        // SGLang's radix cache is token-granular: all but the last token, and the scores are
        // the same.
        Engine::Sglang => {
            let (status, first, _) =
                post(url.clone(), &request(&tb.model, 60, "user_prefix")).await;
            assert_eq!(status, 200, "{first}");
            let (status, v, _) = post(url.clone(), &request(&tb.model, 60, "user_prefix")).await;
            assert_eq!(status, 200, "{v}");
            let prompt_tokens = v["usage"]["prompt_tokens"].as_u64().expect("prompt_tokens");
            assert_eq!(
                v["usage"]["cached_tokens"].as_u64(),
                Some(prompt_tokens - 1),
                "{v}"
            );
            assert_eq!(v["ranking"], first["ranking"]);
        }
    }
    let mut top = request(&tb.model, 10, "auto");
    top["top_k"] = json!(3);
    let (status, v, _) = post(url.clone(), &top).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ranking"].as_array().map(Vec::len), Some(3));

    // readout item: the same prompt, each candidate scored by its own first token (distinct
    // here) instead of its label: every candidate still scored, with other scores.
    let items: Vec<Value> = (0..20u32)
        .map(|i| json!({"id": format!("t{i}"), "tokens": [300 + i, 301, 302]}))
        .collect();
    let mut body = json!({"model": tb.model, "user": request(&tb.model, 1, "auto")["user"],
        "items": items, "mode": "user_prefix"});
    let (status, by_label, _) = post(url.clone(), &body).await;
    assert_eq!(status, 200, "{by_label}");
    body["readout"] = json!("item");
    let (status, by_item, _) = post(url.clone(), &body).await;
    assert_eq!(status, 200, "{by_item}");
    assert_eq!(ids(&by_item["ranking"]), ids(&body["items"]));
    assert_eq!(
        by_item["usage"]["prompt_tokens"],
        by_label["usage"]["prompt_tokens"]
    );
    let scores = |v: &Value| -> Vec<f64> {
        let mut s: Vec<f64> = (v["ranking"].as_array().expect("ranking").iter())
            .map(|r| r["score"].as_f64().expect("score"))
            .collect();
        s.sort_by(f64::total_cmp);
        s
    };
    assert_ne!(
        scores(&by_item),
        scores(&by_label),
        "item tokens, not labels, were scored"
    );

    // Invalid requests: a 400 in OpenAI's shape naming the problem.
    let user = json!({"id": "u", "text": "hello"});
    let item = |id: &str| json!({"id": id, "text": "x y z"});
    let many: Vec<Value> = (0..129).map(|i| item(&i.to_string())).collect();
    let cases = [
        (
            json!({"model": tb.model, "user": user, "items": []}),
            "at least one candidate",
        ),
        (
            json!({"model": tb.model, "user": user, "items": [item("a"), item("a")]}),
            "duplicate id",
        ),
        (
            json!({"model": tb.model, "user": {"id": "u", "text": ""}, "items": [item("a")]}),
            "non-empty",
        ),
        (
            json!({"model": tb.model, "user": user, "items": [item("a")], "mode": "x"}),
            "'mode'",
        ),
        (
            json!({"model": tb.model, "user": user, "items": many}),
            "129 candidates",
        ),
        (
            json!({"model": tb.model, "user": user, "items": [item("a"), item("b")],
                "readout": "item"}),
            "both start with token",
        ),
        (
            json!({"model": tb.model, "user": user, "items": [item("a")], "readout": "x"}),
            "readout 'x'",
        ),
    ];
    for (body, needle) in cases {
        let (status, v, _) = post(url.clone(), &body).await;
        assert_eq!(status, 400, "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        let msg = v["error"]["message"].as_str().expect("message");
        assert!(msg.contains(needle), "{msg} should mention {needle}");
    }

    // The completions extension: recache rewrites the prompt, the engine's completion returns.
    let spec = request(&tb.model, 20, "item_prefix");
    let body = json!({"model": tb.model, "max_tokens": 1, "temperature": 0,
        "recache_rank": {"user": spec["user"], "items": spec["items"], "mode": "item_prefix"}});
    let (status, v, headers) = post(proxy.url("/v1/completions"), &body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(headers["x-recache-prefix"], "item");
    let labels: Value =
        serde_json::from_str(headers["x-recache-labels"].to_str().expect("ascii")).expect("json");
    assert_eq!(labels.as_array().map(Vec::len), Some(20));
    assert!(v["usage"]["prompt_tokens"].as_u64().expect("usage") > 1000);

    // The item pool asked of an engine without it (no connector, no linker): start-up's list
    // fails naming the connector, `/ready` says the engine's pool is missing, and ranking
    // still answers every candidate (the items are computed).
    let mut args = engine.serve_args(&[&tb.upstream]);
    args.rank.pool.rank_item_pool = Some(8);
    let pooled = Proxy::start_with(&args).await;
    assert_eq!(
        pooled.ready().await["item_pool"][0]["engine_pool"],
        "unknown"
    );
    let none = |_: usize, _: usize| {};
    let prepared = recache::rank::startup::prepare(&pooled.state.ranker, None, vec![], &none).await;
    let err = prepared
        .expect_err("an engine without the pool has no list")
        .to_string();
    assert!(err.contains("connector"), "{err}");
    let ready = pooled.ready().await;
    assert_eq!(ready["item_pool"][0]["engine_pool"], "missing", "{ready}");
    let (status, v, _) = post(
        pooled.url("/v1/rank"),
        &request(&tb.model, 10, "item_prefix"),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ranking"].as_array().map(Vec::len), Some(10));
    tb.down();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn vllm_rank_scores_every_candidate() {
    rank_scores_every_candidate(Engine::Vllm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_rank_scores_every_candidate() {
    rank_scores_every_candidate(Engine::Sglang).await;
}
