//! recache as a proxy on loopback, in front of scripted upstreams: forwarding, streaming,
//! replica choice, and every error the contract names (400, 413, 503 within 1 s, 504,
//! mid-stream upstream death), plus graceful shutdown.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::Response;
use support::{FakeUpstream, TestProxy, body, error_code, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[tokio::test]
async fn forwards_method_path_query_headers_and_body_unchanged() {
    let up = FakeUpstream::start(|req| async move {
        use http_body_util::BodyExt;
        let (parts, b) = req.into_parts();
        let bytes = b.collect().await.expect("body").to_bytes();
        let echo = serde_json::json!({
            "method": parts.method.as_str(),
            "uri": parts.uri.to_string(),
            "x": parts.headers.get("x-client").and_then(|v| v.to_str().ok()),
            "body": String::from_utf8_lossy(&bytes),
        });
        Response::builder()
            .status(201)
            .header("x-upstream", "yes")
            .body(body(echo.to_string()))
            .expect("resp")
    })
    .await;
    let proxy = TestProxy::start(&[up.url()], |_| {}).await;
    let sent = r#"{"model":"m","prompt":[1,2,3],"custom_engine_field":{"a":1}}"#;
    let resp = reqwest::Client::new()
        .post(proxy.url("/v1/completions?trace=1"))
        .header("x-client", "abc")
        .body(sent)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.headers()["x-upstream"], "yes");
    let v: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(v["method"], "POST");
    assert_eq!(v["uri"], "/v1/completions?trace=1");
    assert_eq!(v["x"], "abc");
    assert_eq!(v["body"], sent, "body must reach the engine byte for byte");
}

#[tokio::test]
async fn malformed_json_and_wrong_types_get_400_without_reaching_upstream() {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let up = FakeUpstream::start(move |req| {
        if req.uri().path() != "/health" {
            h.fetch_add(1, Ordering::SeqCst);
        }
        async { json("{}") }
    })
    .await;
    let proxy = TestProxy::start(&[up.url()], |_| {}).await;
    let client = reqwest::Client::new();
    for (path, bad) in [
        ("/v1/completions", "{not json"),
        ("/v1/completions", r#"{"prompt": 5}"#),
        ("/v1/completions", r#"{"prompt": "x", "stream": "yes"}"#),
        ("/v1/chat/completions", r#"{"messages": "hi"}"#),
    ] {
        let resp = client
            .post(proxy.url(path))
            .body(bad)
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), 400, "{bad}");
        assert_eq!(error_code(resp).await, "invalid_request");
    }
    // Routes recache does not parse are the engine's business.
    let resp = client
        .post(proxy.url("/tokenize"))
        .body("{not json")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn oversized_bodies_get_413_with_or_without_content_length() {
    let up = FakeUpstream::start(|_| async { json("{}") }).await;
    let proxy = TestProxy::start(&[up.url()], |a| a.max_body_bytes = Some(1024)).await;
    let client = reqwest::Client::new();
    let big = format!(r#"{{"prompt":"{}"}}"#, "x".repeat(4096));
    let resp = client
        .post(proxy.url("/v1/completions"))
        .body(big.clone())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 413);
    assert_eq!(error_code(resp).await, "payload_too_large");
    // Chunked upload, no Content-Length: the limit is enforced while reading. Raw TCP, because
    // an HTTP client may fail writing the rest of the body once the 413 has closed the socket.
    let mut s = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    let head = "POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n";
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s
        .write_all(format!("{:x}\r\n{big}\r\n0\r\n\r\n", big.len()).as_bytes())
        .await;
    let mut answer = vec![0u8; 1024];
    let n = s.read(&mut answer).await.expect("read");
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

#[tokio::test]
async fn dead_upstream_gets_503_within_one_second() {
    // A port nothing listens on.
    let dead = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let proxy = TestProxy::start(&[url], |_| {}).await;
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let t = Instant::now();
        let resp = client
            .post(proxy.url("/v1/completions"))
            .body(r#"{"prompt":"x"}"#)
            .send()
            .await
            .expect("send");
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "took {:?}",
            t.elapsed()
        );
        assert_eq!(resp.status(), 503);
        let code = error_code(resp).await;
        assert!(
            code == "upstream_connect_error" || code == "no_healthy_upstream",
            "{code}"
        );
    }
    let ready = client.get(proxy.url("/ready")).send().await.expect("ready");
    assert_eq!(ready.status(), 503);
}

#[tokio::test]
async fn slow_upstream_gets_504() {
    let up = FakeUpstream::start(|_| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        json("{}")
    })
    .await;
    let proxy = TestProxy::start(&[up.url()], |a| {
        a.upstream_timeout = Some(Duration::from_millis(300))
    })
    .await;
    let t = Instant::now();
    let resp = reqwest::get(proxy.url("/v1/models")).await.expect("send");
    assert_eq!(resp.status(), 504);
    assert!(t.elapsed() < Duration::from_secs(2));
    assert_eq!(error_code(resp).await, "upstream_timeout");
}

/// An upstream speaking raw HTTP/1.1: answers one SSE response per connection, sending
/// `chunks` with `gap` between them, then either finishes or drops the socket mid-stream.
async fn raw_sse_upstream(chunks: Vec<&'static str>, gap: Duration, die: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let chunks = chunks.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                let _ = s.write_all(head.as_bytes()).await;
                for c in chunks {
                    let _ = s
                        .write_all(format!("{:x}\r\n{c}\r\n", c.len()).as_bytes())
                        .await;
                    tokio::time::sleep(gap).await;
                }
                if !die {
                    let _ = s.write_all(b"0\r\n\r\n").await;
                }
                // Dropping the socket without the terminating chunk = upstream died.
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn streams_pass_through_chunk_by_chunk() {
    let url = raw_sse_upstream(
        vec!["data: one\n\n", "data: two\n\n", "data: [DONE]\n\n"],
        Duration::from_millis(400),
        false,
    )
    .await;
    let proxy = TestProxy::start(&[url], |_| {}).await;
    let t = Instant::now();
    let mut resp = reqwest::Client::new()
        .post(proxy.url("/v1/completions"))
        .body(r#"{"prompt":"x","stream":true}"#)
        .send()
        .await
        .expect("send");
    let first = resp.chunk().await.expect("chunk").expect("first chunk");
    assert_eq!(&first[..], b"data: one\n\n");
    assert!(
        t.elapsed() < Duration::from_millis(350),
        "first chunk was held back: {:?}",
        t.elapsed()
    );
    let mut rest = Vec::new();
    while let Some(c) = resp.chunk().await.expect("chunk") {
        rest.extend_from_slice(&c);
    }
    assert_eq!(
        String::from_utf8_lossy(&rest),
        "data: two\n\ndata: [DONE]\n\n"
    );
}

#[tokio::test]
async fn upstream_death_mid_stream_ends_with_an_error_event_and_recache_keeps_serving() {
    let dying = raw_sse_upstream(vec!["data: one\n\n"], Duration::from_millis(50), true).await;
    let proxy = TestProxy::start(&[dying], |_| {}).await;
    let client = reqwest::Client::new();
    let mut resp = client
        .post(proxy.url("/v1/completions"))
        .body(r#"{"prompt":"x","stream":true}"#)
        .send()
        .await
        .expect("send");
    let mut got = Vec::new();
    let ended_with_error = loop {
        match tokio::time::timeout(Duration::from_secs(5), resp.chunk())
            .await
            .expect("stream hung")
        {
            Ok(Some(c)) => got.extend_from_slice(&c),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("data: one\n\n"), "{text}");
    assert!(
        text.contains(r#""code":"upstream_stream_error""#),
        "no error event in {text:?} (cut: {ended_with_error})"
    );
    assert!(
        ended_with_error,
        "the client must see the stream cut, not a clean end"
    );
    // recache is still up.
    let health = client
        .get(proxy.url("/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status(), 200);
}

#[tokio::test]
async fn picks_least_outstanding_replica_and_takes_failed_ones_out_and_back() {
    let slow_hits = Arc::new(AtomicUsize::new(0));
    let s = slow_hits.clone();
    let slow = FakeUpstream::start(move |req| {
        s.fetch_add(1, Ordering::SeqCst);
        async move {
            if req.uri().path() == "/v1/completions" {
                tokio::time::sleep(Duration::from_millis(800)).await;
            }
            json("{}")
        }
    })
    .await;
    let fast_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let fast_addr = fast_listener.local_addr().expect("addr");
    let fast = FakeUpstream::on(fast_listener, |_| async { json(r#"{"from":"fast"}"#) });
    let proxy = TestProxy::start(&[slow.url(), fast.url()], |_| {}).await;
    proxy.wait_ready().await;
    let client = reqwest::Client::new();
    // Occupy one replica with a slow request; the next ones must go to the idle one.
    let slow_req = {
        let c = client.clone();
        let u = proxy.url("/v1/completions");
        tokio::spawn(async move { c.post(u).body(r#"{"prompt":"x"}"#).send().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = slow_hits.load(Ordering::SeqCst);
    for _ in 0..5 {
        let resp = client
            .get(proxy.url("/v1/models"))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.text().await.expect("text"), r#"{"from":"fast"}"#);
    }
    // Health probes may also hit the slow replica; requests must not have.
    let probes_only = slow_hits.load(Ordering::SeqCst) - before;
    assert!(
        probes_only <= 3,
        "{probes_only} extra requests reached the busy replica"
    );
    assert_eq!(slow_req.await.expect("join").expect("slow").status(), 200);

    // Kill the fast replica: requests fail over, it is marked unhealthy.
    drop(fast);
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        let resp = client
            .get(proxy.url("/v1/models"))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), 200);
    }
    let metrics = client
        .get(proxy.url("/metrics"))
        .send()
        .await
        .expect("m")
        .text()
        .await
        .expect("t");
    assert!(
        metrics.contains(&format!(
            "recache_upstream_healthy{{upstream=\"{fast_addr}\"}} 0"
        )),
        "{metrics}"
    );
    // Bring it back on the same port: probes take it back in.
    let fast = FakeUpstream::on(
        TcpListener::bind(fast_addr).await.expect("rebind"),
        |_| async { json(r#"{"from":"fast"}"#) },
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let metrics = client
        .get(proxy.url("/metrics"))
        .send()
        .await
        .expect("m")
        .text()
        .await
        .expect("t");
    assert!(
        metrics.contains(&format!(
            "recache_upstream_healthy{{upstream=\"{fast_addr}\"}} 1"
        )),
        "{metrics}"
    );
    drop(fast);
}

#[tokio::test]
async fn graceful_shutdown_drains_in_flight_requests() {
    let up = FakeUpstream::start(|_| async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        json(r#"{"done":true}"#)
    })
    .await;
    let mut proxy = TestProxy::start(&[up.url()], |a| {
        a.drain_timeout = Some(Duration::from_secs(5))
    })
    .await;
    let client = reqwest::Client::new();
    let in_flight = {
        let (c, u) = (client.clone(), proxy.url("/v1/models"));
        tokio::spawn(async move { c.get(u).send().await?.text().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.stop();
    let body = in_flight
        .await
        .expect("join")
        .expect("in-flight request must complete");
    assert_eq!(body, r#"{"done":true}"#);
    let drained = tokio::time::timeout(Duration::from_secs(3), &mut proxy.done)
        .await
        .expect("exit")
        .expect("join");
    assert!(drained);
    assert!(
        reqwest::get(proxy.url("/health")).await.is_err(),
        "still accepting after shutdown"
    );
}

#[tokio::test]
async fn own_routes_report_health_readiness_and_metrics() {
    let up = FakeUpstream::start(|_| async { json("{}") }).await;
    let proxy = TestProxy::start(&[up.url()], |_| {}).await;
    proxy.wait_ready().await;
    let client = reqwest::Client::new();
    let _ = client
        .get(proxy.url("/v1/models"))
        .send()
        .await
        .expect("send");
    let text = client
        .get(proxy.url("/metrics"))
        .send()
        .await
        .expect("m")
        .text()
        .await
        .expect("t");
    for needle in [
        r#"recache_requests_total{route="/v1/models",status="200"} 1"#,
        "recache_request_duration_seconds_bucket",
        "recache_in_flight_requests",
        &format!("recache_upstream_healthy{{upstream=\"{}\"}} 1", up.addr),
    ] {
        assert!(text.contains(needle), "missing {needle} in\n{text}");
    }
}
