//! recache in front of the real vLLM testbed: every OpenAI route passes through unchanged,
//! streaming equals non-streaming at temperature 0, usage passes through, and replicas fail
//! over, die mid-stream and are taken back after a restart.

use std::time::Duration;

use recache_integration::{Proxy, Testbed};
use serde_json::{Value, json};

async fn post(url: String, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("json body"))
}

/// Text of an SSE completion stream, and the usage its last chunk carries.
async fn stream_text(url: String, body: Value) -> (String, Option<Value>) {
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
    let (mut text, mut usage) = (String::new(), None);
    for line in String::from_utf8_lossy(&raw).lines() {
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(data).expect("event json");
        if let Some(t) = v["choices"][0]["text"].as_str() {
            text.push_str(t);
        }
        if !v["usage"].is_null() {
            usage = Some(v["usage"].clone());
        }
    }
    (text, usage)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn openai_routes_pass_through_a_real_vllm() {
    let tb = Testbed::up("it-routes", &[]);
    let proxy = Proxy::start(&[&tb.upstream]).await;
    let model = tb.model.clone();

    // Text prompt, compared with the engine answering directly.
    let req = json!({"model": model, "prompt": "recache sits in front of vLLM", "max_tokens": 16, "temperature": 0});
    let (status, via) = post(proxy.url("/v1/completions"), req.clone()).await;
    assert_eq!(status, 200, "{via}");
    let (_, direct) = post(format!("{}/v1/completions", tb.upstream), req).await;
    assert_eq!(via["choices"][0]["text"], direct["choices"][0]["text"]);
    assert_eq!(
        via["usage"], direct["usage"],
        "usage must pass through unchanged"
    );

    // Token-id prompt.
    let ids: Vec<u32> = (100..164).collect();
    let (status, v) = post(
        proxy.url("/v1/completions"),
        json!({"model": model, "prompt": ids, "max_tokens": 4}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["prompt_tokens"], 64);

    // Chat.
    let chat = json!({"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8});
    let (status, v) = post(proxy.url("/v1/chat/completions"), chat).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["choices"][0]["message"]["content"].is_string(), "{v}");

    // Streaming equals non-streaming at temperature 0; usage arrives in the last chunk.
    let base = json!({"model": model, "prompt": "streaming through the sidecar", "max_tokens": 24, "temperature": 0, "ignore_eos": true});
    let (_, whole) = post(proxy.url("/v1/completions"), base.clone()).await;
    let mut streamed = base.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let (text, usage) = stream_text(proxy.url("/v1/completions"), streamed).await;
    assert_eq!(text, whole["choices"][0]["text"].as_str().expect("text"));
    assert_eq!(usage.expect("usage chunk")["completion_tokens"], 24);

    // Other routes: models, tokenize, detokenize.
    let models: Value = reqwest::get(proxy.url("/v1/models"))
        .await
        .expect("models")
        .json()
        .await
        .expect("json");
    assert_eq!(models["data"][0]["id"], tb.model);
    let (status, tok) = post(
        proxy.url("/tokenize"),
        json!({"model": model, "prompt": "hello world"}),
    )
    .await;
    assert_eq!(status, 200, "{tok}");
    let (status, detok) = post(
        proxy.url("/detokenize"),
        json!({"model": model, "tokens": tok["tokens"]}),
    )
    .await;
    assert_eq!(status, 200, "{detok}");
    assert_eq!(detok["prompt"], "hello world");

    // recache rejects a malformed body itself, in OpenAI's error shape.
    let (status, err) = post(
        proxy.url("/v1/completions"),
        json!({"model": model, "prompt": {"not": "a prompt"}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["param"], "prompt");
    tb.down();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn replicas_share_load_fail_over_die_mid_stream_and_come_back() {
    let a = Testbed::up("it-rep-a", &[]);
    let b = Testbed::up("it-rep-b", &[]);
    let proxy = Proxy::start(&[&a.upstream, &b.upstream]).await;
    let req = json!({"model": a.model, "prompt": "replica", "max_tokens": 8});

    // Concurrent requests spread over both replicas (fewest outstanding wins).
    let (a0, b0) = (
        a.metric("vllm:request_success_total").await,
        b.metric("vllm:request_success_total").await,
    );
    let mut tasks = Vec::new();
    for _ in 0..8 {
        tasks.push(tokio::spawn(post(
            proxy.url("/v1/completions"),
            req.clone(),
        )));
    }
    for t in tasks {
        assert_eq!(t.await.expect("join").0, 200);
    }
    let (da, db) = (
        a.metric("vllm:request_success_total").await - a0,
        b.metric("vllm:request_success_total").await - b0,
    );
    assert_eq!(da + db, 8.0);
    assert!(da >= 1.0 && db >= 1.0, "load not shared: a={da} b={db}");

    // Kill a replica in the middle of a long stream: the client sees an error event and a cut.
    let long = json!({"model": a.model, "prompt": "long", "max_tokens": 7000, "ignore_eos": true, "stream": true});
    let mut streams = Vec::new();
    for _ in 0..2 {
        // Two streams, so one lands on each replica.
        let resp = reqwest::Client::new()
            .post(proxy.url("/v1/completions"))
            .json(&long)
            .send()
            .await
            .expect("send");
        streams.push(resp);
    }
    // Both streams are producing before the replica dies.
    let mut firsts = Vec::new();
    for resp in &mut streams {
        let first = tokio::time::timeout(Duration::from_secs(60), resp.chunk()).await;
        firsts.push(
            first
                .expect("first chunk in time")
                .expect("chunk")
                .expect("some data")
                .to_vec(),
        );
    }
    // Kill a replica that is serving a stream now (fewest-outstanding normally puts one
    // stream on each; either way the victim has one).
    let spread: Vec<usize> = proxy
        .state
        .upstreams
        .all()
        .iter()
        .map(|u| u.in_flight())
        .collect();
    let shown: Vec<String> = firsts
        .iter()
        .map(|f| String::from_utf8_lossy(f).chars().take(200).collect())
        .collect();
    eprintln!("streams per replica: {spread:?}; first chunks: {shown:?}");
    let victim_index = if spread[1] >= 1 { 1 } else { 0 };
    assert!(
        spread[victim_index] >= 1,
        "no replica is serving a stream: {spread:?} {shown:?}"
    );
    let (victim, survivor) = if victim_index == 1 {
        (&b, &a)
    } else {
        (&a, &b)
    };
    victim.kill();
    let mut saw_error_event = false;
    for (mut resp, first) in streams.into_iter().zip(firsts) {
        let mut raw = first;
        // The survivor may still be generating when we stop looking; that is fine.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let cut = loop {
            match tokio::time::timeout_at(deadline, resp.chunk()).await {
                Ok(Ok(Some(c))) => raw.extend_from_slice(&c),
                Ok(Ok(None)) | Err(_) => break false,
                Ok(Err(_)) => break true,
            }
        };
        let text = String::from_utf8_lossy(&raw);
        if text.contains("upstream_stream_error") {
            assert!(
                cut,
                "a stream with an error event must end with the connection cut"
            );
            saw_error_event = true;
        } else {
            assert!(!cut, "a stream was cut without an error event: {text:.300}");
        }
    }
    assert!(
        saw_error_event,
        "the stream on the killed replica did not report the failure"
    );

    // recache keeps serving from the survivor.
    for _ in 0..4 {
        let (status, v) = post(proxy.url("/v1/completions"), req.clone()).await;
        assert_eq!(status, 200, "{v}");
    }

    // Restart the victim on the same port: health probes take it back and it serves again.
    let b2 = Testbed::up(&victim.name, &["--port", &victim.port()]);
    assert_eq!(b2.upstream, victim.upstream);
    let before = b2.metric("vllm:request_success_total").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while b2.metric("vllm:request_success_total").await == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "restarted replica never received traffic"
        );
        let mut tasks = Vec::new();
        for _ in 0..4 {
            tasks.push(tokio::spawn(post(
                proxy.url("/v1/completions"),
                req.clone(),
            )));
        }
        for t in tasks {
            assert_eq!(t.await.expect("join").0, 200);
        }
    }
    survivor.down();
    b2.down();
}
