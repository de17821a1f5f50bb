//! recache in front of the real SGLang testbed (`up --engine sglang`, `recache serve --engine
//! sglang`): the OpenAI routes and SGLang's native ones (`/generate`, `/flush_cache`) pass
//! through unchanged, streaming equals non-streaming at temperature 0 on both dialects, health
//! probes use SGLang's `/health`, recache's own 400s still apply, and an engine killed
//! mid-stream gives the client an error event and a cut.
//!
//! One SGLang instance for everything: a start costs about a minute on CI machines.

use std::time::Duration;

use recache::config::ServeArgs;
use recache_integration::{Proxy, SGLANG_HEALTH_INTERVAL, Testbed};
use serde_json::{Value, json};

async fn post(url: String, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The `data:` events of an SSE stream, parsed (`[DONE]` dropped).
async fn sse_events(url: String, body: Value) -> Vec<Value> {
    let mut resp = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let mut raw = Vec::new();
    while let Some(chunk) = resp.chunk().await.expect("chunk") {
        raw.extend_from_slice(&chunk);
    }
    String::from_utf8_lossy(&raw)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("event json"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn openai_and_native_routes_pass_through_a_real_sglang() {
    let tb = Testbed::up("it-sgl-routes", &["--engine", "sglang"]);
    let args = ServeArgs {
        upstream: vec![tb.upstream.clone()],
        engine: "sglang".parse().ok(),
        health_interval: Some(SGLANG_HEALTH_INTERVAL),
        ..Default::default()
    };
    let proxy = Proxy::start_with(&args).await;
    let model = tb.model.clone();

    // Text prompt, compared with the engine answering directly.
    let req = json!({"model": model, "prompt": "recache sits in front of SGLang", "max_tokens": 16, "temperature": 0});
    let (status, via) = post(proxy.url("/v1/completions"), req.clone()).await;
    assert_eq!(status, 200, "{via}");
    let (_, direct) = post(format!("{}/v1/completions", tb.upstream), req).await;
    assert_eq!(via["choices"][0]["text"], direct["choices"][0]["text"]);
    assert_eq!(
        via["usage"]["prompt_tokens"],
        direct["usage"]["prompt_tokens"]
    );
    // The second identical prompt is a prefix hit, reported with --enable-cache-report.
    assert!(
        via["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .is_some(),
        "{via}"
    );
    assert!(
        direct["usage"]["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "{direct}"
    );

    // Token-id prompt, chat.
    let ids: Vec<u32> = (100..164).collect();
    let (status, v) = post(
        proxy.url("/v1/completions"),
        json!({"model": model, "prompt": ids, "max_tokens": 4}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 64);
    let chat = json!({"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8});
    let (status, v) = post(proxy.url("/v1/chat/completions"), chat).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");

    // OpenAI streaming equals non-streaming at temperature 0; usage in the last chunk.
    let base = json!({"model": model, "prompt": "streaming through the sidecar", "max_tokens": 24, "temperature": 0, "ignore_eos": true});
    let (_, whole) = post(proxy.url("/v1/completions"), base.clone()).await;
    let mut streamed = base.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let events = sse_events(proxy.url("/v1/completions"), streamed).await;
    let text: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["text"].as_str())
        .collect();
    assert_eq!(text, whole["choices"][0]["text"].as_str().expect("text"));
    let usage = events.iter().rev().find(|e| !e["usage"].is_null());
    assert_eq!(
        usage.expect("usage chunk")["usage"]["completion_tokens"],
        24
    );

    // SGLang's native /generate: token ids in, same answer through recache as direct.
    let gen_req = json!({"input_ids": (200..300).collect::<Vec<u32>>(),
        "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": true}});
    let (status, via) = post(proxy.url("/generate"), gen_req.clone()).await;
    assert_eq!(status, 200, "{via}");
    let (_, direct) = post(format!("{}/generate", tb.upstream), gen_req.clone()).await;
    assert_eq!(via["output_ids"], direct["output_ids"]);
    assert_eq!(via["meta_info"]["prompt_tokens"], 100);
    assert_eq!(
        direct["meta_info"]["cached_tokens"], 99,
        "the repeat hits every token but the last: {direct}"
    );
    // /generate streaming: cumulative output ids, the last equals the whole answer.
    let mut gen_stream = gen_req.clone();
    gen_stream["stream"] = json!(true);
    let events = sse_events(proxy.url("/generate"), gen_stream).await;
    assert!(events.len() >= 2, "{events:?}");
    let last = events.last().expect("events");
    assert_eq!(last["output_ids"], direct["output_ids"], "{last}");

    // Other routes: models, tokenize, detokenize, flush_cache.
    let models: Value = reqwest::get(proxy.url("/v1/models"))
        .await
        .expect("models")
        .json()
        .await
        .expect("json");
    assert_eq!(models["data"][0]["id"], tb.model);
    let (status, tok) = post(
        proxy.url("/tokenize"),
        json!({"model": model, "prompt": "hello world", "add_special_tokens": false}),
    )
    .await;
    assert_eq!(status, 200, "{tok}");
    let (status, detok) = post(
        proxy.url("/detokenize"),
        json!({"model": model, "tokens": tok["tokens"]}),
    )
    .await;
    assert_eq!(status, 200, "{detok}");
    assert_eq!(detok["text"], "hello world");
    let (status, flushed) = post(proxy.url("/flush_cache"), json!({})).await;
    assert_eq!(status, 200, "{flushed}");
    let (_, after) = post(proxy.url("/generate"), gen_req.clone()).await;
    assert_eq!(after["meta_info"]["cached_tokens"], 0, "{after}");

    // recache rejects a malformed body itself, in OpenAI's error shape.
    let (status, err) = post(
        proxy.url("/v1/completions"),
        json!({"model": model, "prompt": {"not": "a prompt"}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["param"], "prompt");
    let ready = reqwest::get(proxy.url("/ready")).await.expect("ready");
    assert_eq!(ready.status(), 200, "probes of SGLang's /health pass");

    // The engine dies in the middle of a long stream: an error event, then the cut.
    let long = json!({"model": model, "prompt": "long", "max_tokens": 3000, "ignore_eos": true, "stream": true});
    let mut resp = reqwest::Client::new()
        .post(proxy.url("/v1/completions"))
        .json(&long)
        .send()
        .await
        .expect("send");
    let first = tokio::time::timeout(Duration::from_secs(60), resp.chunk()).await;
    let mut raw = first
        .expect("first chunk in time")
        .expect("chunk")
        .expect("some data")
        .to_vec();
    tb.kill();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let cut = loop {
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => raw.extend_from_slice(&c),
            Ok(Ok(None)) | Err(_) => break false,
            Ok(Err(_)) => break true,
        }
    };
    let text = String::from_utf8_lossy(&raw);
    assert!(
        text.contains("upstream_stream_error") && cut,
        "cut={cut}: {}",
        text.chars().rev().take(400).collect::<String>()
    );
    // The dead engine refuses connections: recache takes it out and answers 503 itself.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (status, err) = post(
        proxy.url("/generate"),
        json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}}),
    )
    .await;
    assert_eq!(status, 503, "{err}");
    tb.down();
}
