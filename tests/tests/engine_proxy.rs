//! recache in front of the real vLLM and SGLang testbeds (SGLang: `up --engine sglang`,
//! `recache serve --engine sglang`). One body per engine: the OpenAI routes pass through
//! unchanged (SGLang: also its native `/generate` and `/flush_cache`), streaming equals
//! non-streaming at temperature 0 (SGLang: on both dialects), usage passes through, and
//! recache's own 400s apply. On vLLM with two replicas: they share load, `--routing prefix`
//! sends a returning prompt where its prefix is cached (with each replica's KV events:
//! canaries verify both mirrors `exact`, and a restarted replica's mirror is resynced), and on
//! engine death mid-stream they fail over and take a restarted replica back; on SGLang with its single instance (an error
//! event and a cut, then recache's own 503), as a start costs about a minute on CI machines.

mod engine_proxy_support;

use std::time::Duration;

use engine_proxy_support::{
    all_200, assert_json_200, open_two_streams, post, read_to_end_or_cut, sse_events,
};
use recache_integration::{Engine, Proxy, wait_for};
use serde_json::{Value, json};

async fn routes_pass_through(engine: Engine) {
    let tb = engine.testbed("routes", &[]);
    let proxy = Proxy::start_with(&engine.serve_args(&[&tb.upstream])).await;
    let model = tb.model.clone();

    // Text prompt, compared with the engine answering directly.
    let name = match engine {
        Engine::Vllm => "vLLM",
        Engine::Sglang => "SGLang",
    };
    let req = json!({"model": model, "prompt": format!("recache sits in front of {name}"), "max_tokens": 16, "temperature": 0});
    let (status, via) = post(proxy.url("/v1/completions"), req.clone()).await;
    assert_eq!(status, 200, "{via}");
    let (_, direct) = post(format!("{}/v1/completions", tb.upstream), req).await;
    assert!(via["choices"][0]["text"].is_string(), "{via}");
    assert_eq!(via["choices"][0]["text"], direct["choices"][0]["text"]);
    match engine {
        Engine::Vllm => assert_eq!(
            via["usage"], direct["usage"],
            "usage must pass through unchanged"
        ),
        // SGLang reports cached tokens (--enable-cache-report), which differ between the first
        // and the second identical prompt, so the usages are compared field by field.
        Engine::Sglang => {
            assert_eq!(
                via["usage"]["prompt_tokens"],
                direct["usage"]["prompt_tokens"]
            );
            // The second identical prompt is a prefix hit.
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
        }
    }

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

    // SGLang only: its native /generate (vLLM has none).
    let gen_req = json!({"input_ids": (200..300).collect::<Vec<u32>>(),
        "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": true}});
    if engine == Engine::Sglang {
        // Token ids in, same answer through recache as direct.
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
    }

    // Other routes: models, tokenize, detokenize (SGLang: flush_cache).
    let models: Value = reqwest::get(proxy.url("/v1/models"))
        .await
        .expect("models")
        .json()
        .await
        .expect("json");
    assert_eq!(models["data"][0]["id"], tb.model);
    let tokenize = match engine {
        Engine::Vllm => json!({"model": model, "prompt": "hello world"}),
        // SGLang adds special tokens unless told not to, and detokenizes them back.
        Engine::Sglang => {
            json!({"model": model, "prompt": "hello world", "add_special_tokens": false})
        }
    };
    let (status, tok) = post(proxy.url("/tokenize"), tokenize).await;
    assert_eq!(status, 200, "{tok}");
    let (status, detok) = post(
        proxy.url("/detokenize"),
        json!({"model": model, "tokens": tok["tokens"]}),
    )
    .await;
    assert_eq!(status, 200, "{detok}");
    // The engines name the detokenized field differently.
    let detok_field = match engine {
        Engine::Vllm => "prompt",
        Engine::Sglang => "text",
    };
    assert_eq!(detok[detok_field], "hello world");
    if engine == Engine::Sglang {
        let (status, flushed) = post(proxy.url("/flush_cache"), json!({})).await;
        assert_eq!(status, 200, "{flushed}");
        let (_, after) = post(proxy.url("/generate"), gen_req.clone()).await;
        assert_eq!(after["meta_info"]["cached_tokens"], 0, "{after}");
    }

    // recache rejects a malformed body itself, in OpenAI's error shape.
    let (status, err) = post(
        proxy.url("/v1/completions"),
        json!({"model": model, "prompt": {"not": "a prompt"}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["param"], "prompt");

    // SGLang: health probes of its /health, and its single instance killed mid-stream (vLLM's
    // death mid-stream is part of vllm_replicas_share_load_fail_over_die_mid_stream_and_come_back).
    if engine == Engine::Sglang {
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
        let cut = read_to_end_or_cut(&mut resp, &mut raw, Duration::from_secs(30)).await;
        let text = String::from_utf8_lossy(&raw);
        assert!(
            text.contains("upstream_stream_error") && cut,
            "cut={cut}: {}",
            text.chars().rev().take(400).collect::<String>()
        );
        // The dead engine refuses connections: recache takes it out and answers 503 itself.
        let engine_addr = tb.upstream.trim_start_matches("http://").to_string();
        wait_for(
            format_args!("the killed engine's port {engine_addr} refusing connections"),
            Duration::from_secs(30),
            async || match tokio::net::TcpStream::connect(&engine_addr).await {
                Err(_) => Ok(()),
                Ok(_) => Err("still accepting"),
            },
        )
        .await;
        let (status, err) = post(
            proxy.url("/generate"),
            json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}}),
        )
        .await;
        assert_eq!(status, 503, "{err}");
    }
    tb.down();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn vllm_routes_pass_through() {
    routes_pass_through(Engine::Vllm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_routes_pass_through() {
    routes_pass_through(Engine::Sglang).await;
}

/// vLLM only: two SGLang instances (and the restart) would cost minutes more on CI's 2 cores;
/// SGLang's death mid-stream is covered with its single instance above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn vllm_replicas_share_load_fail_over_die_mid_stream_and_come_back() {
    let a = Engine::Vllm.testbed("rep-a", &[]);
    let b = Engine::Vllm.testbed("rep-b", &[]);
    let proxy = Proxy::start(&[&a.upstream, &b.upstream]).await;
    let req = json!({"model": a.model, "prompt": "replica", "max_tokens": 8});

    // Concurrent requests spread over both replicas (fewest outstanding wins).
    let (a0, b0) = (
        a.metric("vllm:request_success_total").await,
        b.metric("vllm:request_success_total").await,
    );
    all_200(proxy.url("/v1/completions"), &req, 8).await;
    let (da, db) = (
        a.metric("vllm:request_success_total").await - a0,
        b.metric("vllm:request_success_total").await - b0,
    );
    assert_eq!(da + db, 8.0);
    assert!(da >= 1.0 && db >= 1.0, "load not shared: a={da} b={db}");

    // `--routing prefix` in front of the same replicas: a returning user's longer prompt goes
    // where its prefix is cached, every time (least-loaded would land there about half the
    // time), while other users' prompts spread.
    // With each replica's KV events, canaries every 2 s: both mirrors verified `exact`.
    let mut args = Engine::Vllm.serve_args(&[&a.upstream, &b.upstream]);
    args.routing = Some("prefix".into());
    args.kvloop.kv_events = vec![a.kv_events.clone(), b.kv_events.clone()];
    args.route_canary = Some(Duration::from_secs(2));
    let routed = Proxy::start_with(&args).await;
    routed
        .wait_mirrors(&["exact", "exact"], Duration::from_secs(60))
        .await;
    let prompt = |user: u32, len: u32| -> Vec<u32> {
        (0..len).map(|t| 10 + (user * 997 + t * 7) % 3000).collect()
    };
    let cached = |v: &Value| v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64();
    let url = routed.url("/v1/completions");
    let first = post(
        url.clone(),
        json!({"model": a.model, "prompt": prompt(1, 512), "max_tokens": 1}),
    )
    .await;
    assert_json_200(first);
    for turn in 0..3u32 {
        for other in 0..2u32 {
            let body = json!({"model": a.model, "prompt": prompt(100 + turn * 2 + other, 512), "max_tokens": 1});
            assert_json_200(post(url.clone(), body).await);
        }
        let mut longer = prompt(1, 512);
        longer.extend(prompt(50 + turn, 40));
        let (status, v) = post(
            url.clone(),
            json!({"model": a.model, "prompt": longer, "max_tokens": 1}),
        )
        .await;
        assert_eq!(status, 200, "{v}");
        assert!(
            cached(&v).is_some_and(|c| c >= 512),
            "turn {turn}: the returning prompt missed its cached prefix: {}",
            v["usage"]
        );
    }
    let spread: Vec<u64> = routed
        .state
        .client
        .replicas()
        .iter()
        .map(|r| {
            let text = String::from_utf8_lossy(&routed.state.metrics.render()).into_owned();
            let key = format!("recache_upstream_routed_total{{upstream=\"{}\"}} ", r.label);
            text.lines()
                .find_map(|l| l.strip_prefix(key.as_str())?.trim().parse().ok())
                .unwrap_or(0)
        })
        .collect();
    assert!(
        spread.iter().all(|n| *n >= 2),
        "other users spread over both: {spread:?}"
    );
    // The canaries agreed on both engines: predicted cached tokens = reported ones.
    let text = String::from_utf8_lossy(&routed.state.metrics.render()).into_owned();
    for r in routed.state.client.replicas() {
        let agree = format!(
            "recache_route_canary_total{{outcome=\"agree\",upstream=\"{}\"}} ",
            r.label
        );
        assert!(
            text.lines().any(|l| l.starts_with(&agree)),
            "no agreeing canary on {}: {text}",
            r.label
        );
        assert!(!r.mirror.silent_zero(), "{}: silent 0% raised", r.label);
    }

    // Kill a replica in the middle of a long stream: the client sees an error event and a cut.
    // The victim must still be generating when it dies: a tiny model can finish a stream
    // while the test waits for the other one's first token (CI saw exactly that: neither
    // stream errored because the victim's had already ended). So the victim is a replica
    // whose engine reports a running request, and the streams are re-opened if neither does.
    let long = json!({"model": a.model, "prompt": "long", "max_tokens": 7000, "ignore_eos": true, "stream": true});
    let mut attempt = 0;
    let (streams, firsts, victim_index) = loop {
        attempt += 1;
        let (streams, firsts) = open_two_streams(&proxy, &long, [&a, &b]).await;
        let running = [
            a.metric("vllm:num_requests_running").await,
            b.metric("vllm:num_requests_running").await,
        ];
        eprintln!("attempt {attempt}: engines running {running:?}");
        if let Some(i) = [1, 0].into_iter().find(|&i| running[i] >= 1.0) {
            break (streams, firsts, i);
        }
        assert!(
            attempt < 3,
            "no engine was still generating a 7000-token stream once both had a first chunk, 3 times"
        );
    };
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
        let cut = read_to_end_or_cut(&mut resp, &mut raw, Duration::from_secs(20)).await;
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
        assert_json_200(post(proxy.url("/v1/completions"), req.clone()).await);
    }

    // Restart the victim on the same port: health probes take it back and it serves again.
    // Same ports, events included: the routing proxy's mirror of it must resync.
    let events_port = victim.kv_events.rsplit(':').next().unwrap_or_default();
    let b2 = recache_integration::Testbed::up(
        &victim.name,
        &["--port", &victim.port(), "--kv-events-port", events_port],
    );
    assert_eq!(b2.upstream, victim.upstream);
    let before = b2.metric("vllm:request_success_total").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while b2.metric("vllm:request_success_total").await == before {
        assert!(
            tokio::time::Instant::now() < deadline,
            "restarted replica never received traffic"
        );
        all_200(proxy.url("/v1/completions"), &req, 4).await;
    }
    // The routing proxy saw the victim's events stop and start again: cleared, re-verified.
    routed
        .wait_mirrors(&["exact", "exact"], Duration::from_secs(60))
        .await;
    let text = String::from_utf8_lossy(&routed.state.metrics.render()).into_owned();
    assert!(
        text.contains("recache_route_mirror_resyncs_total{reason=\"reconnect\""),
        "the restarted replica's mirror was not resynced: {text}"
    );
    drop(routed);
    survivor.down();
    b2.down();
}
