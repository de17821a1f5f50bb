//! recache as a proxy on loopback, in front of scripted upstreams: forwarding, streaming,
//! replica choice, and the engine-side errors the contract names (503 within 1 s, 504,
//! mid-stream upstream death), plus graceful shutdown; body checks (400, 413) are in
//! `request_body.rs`.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http::Response;
use support::{
    FakeUpstream, TestProxy, body, error_code, json, post_completion, wait_for, wait_until,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

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
async fn dead_upstream_gets_503_within_one_second() {
    // A port nothing listens on.
    let dead = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", dead.local_addr().expect("addr"));
    drop(dead);
    let proxy = TestProxy::start(&[url], |_| {}).await;
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let t = Instant::now();
        let resp = post_completion(&client, &proxy).await;
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

/// An upstream speaking raw HTTP/1.1: answers a POST with one SSE response on its
/// connection, sending the first of `chunks` at once and each later one, and then the end,
/// only when `gate` gives a permit (the test releases them once it has seen what it waits
/// for); the end is the terminating chunk, or with `die` the socket dropped mid-stream. Other
/// requests (health probes) get `{}` at once.
async fn raw_sse_upstream(chunks: Vec<&'static str>, gate: Arc<Semaphore>, die: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (chunks, gate) = (chunks.clone(), gate.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                if !buf.starts_with(b"POST ") {
                    let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
                    let _ = s.write_all(ok.as_bytes()).await;
                    return;
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                let _ = s.write_all(head.as_bytes()).await;
                for (i, c) in chunks.into_iter().enumerate() {
                    if i > 0 {
                        let Ok(p) = gate.acquire().await else { return };
                        p.forget();
                    }
                    let _ = s
                        .write_all(format!("{:x}\r\n{c}\r\n", c.len()).as_bytes())
                        .await;
                }
                let Ok(p) = gate.acquire().await else { return };
                p.forget();
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
    // The upstream holds the rest of the stream back until the client has the first chunk:
    // a proxy that buffered would never deliver it (no clock involved).
    let gate = Arc::new(Semaphore::new(0));
    let url = raw_sse_upstream(
        vec!["data: one\n\n", "data: two\n\n", "data: [DONE]\n\n"],
        gate.clone(),
        false,
    )
    .await;
    let proxy = TestProxy::start(&[url], |_| {}).await;
    let mut resp = reqwest::Client::new()
        .post(proxy.url("/v1/completions"))
        .body(r#"{"prompt":"x","stream":true}"#)
        .send()
        .await
        .expect("send");
    let first = tokio::time::timeout(Duration::from_secs(10), resp.chunk())
        .await
        .expect("the first chunk never reached the client while the upstream held the rest back")
        .expect("chunk")
        .expect("first chunk");
    assert_eq!(&first[..], b"data: one\n\n");
    gate.add_permits(3);
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
    let gate = Arc::new(Semaphore::new(0));
    let dying = raw_sse_upstream(vec!["data: one\n\n"], gate.clone(), true).await;
    let proxy = TestProxy::start(&[dying], |_| {}).await;
    let client = reqwest::Client::new();
    let mut resp = client
        .post(proxy.url("/v1/completions"))
        .body(r#"{"prompt":"x","stream":true}"#)
        .send()
        .await
        .expect("send");
    let mut got = Vec::new();
    let mut released = false;
    let ended_with_error = loop {
        match tokio::time::timeout(Duration::from_secs(5), resp.chunk())
            .await
            .expect("stream hung")
        {
            Ok(Some(c)) => {
                got.extend_from_slice(&c);
                // The first chunk is through: now the upstream dies.
                if !released {
                    released = true;
                    gate.add_permits(1);
                }
            }
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

/// recache's `/metrics` as text.
async fn metrics(client: &reqwest::Client, proxy: &TestProxy) -> String {
    client
        .get(proxy.url("/metrics"))
        .send()
        .await
        .expect("m")
        .text()
        .await
        .expect("t")
}

/// Waits until recache's health gauge for `addr` reads `value` (probes run every 100 ms).
async fn wait_health(client: &reqwest::Client, proxy: &TestProxy, addr: SocketAddr, value: u8) {
    let line = format!("recache_upstream_healthy{{upstream=\"{addr}\"}} {value}");
    wait_for(
        format_args!("`{line}` in /metrics"),
        Duration::from_secs(10),
        async || {
            let m = metrics(client, proxy).await;
            if m.contains(&line) { Ok(()) } else { Err(m) }
        },
    )
    .await
}

#[tokio::test]
async fn picks_least_outstanding_replica_and_takes_failed_ones_out_and_back() {
    // The slow replica holds each completion until the test releases it, so it is busy for
    // exactly as long as the test needs (no race against a fixed delay).
    let slow_hits = Arc::new(AtomicUsize::new(0));
    let busy = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Semaphore::new(0));
    let (s, b, r) = (slow_hits.clone(), busy.clone(), release.clone());
    let slow = FakeUpstream::start(move |req| {
        s.fetch_add(1, Ordering::SeqCst);
        let (b, r) = (b.clone(), r.clone());
        async move {
            if req.uri().path() == "/v1/completions" {
                b.fetch_add(1, Ordering::SeqCst);
                if let Ok(p) = r.acquire().await {
                    p.forget();
                }
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
    wait_until(
        "the first completion reaching the slow replica",
        Duration::from_secs(10),
        async || busy.load(Ordering::SeqCst) == 1,
    )
    .await;
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
    release.add_permits(1);
    assert_eq!(slow_req.await.expect("join").expect("slow").status(), 200);

    // Kill the fast replica (its port refuses connections once stop returns): requests fail
    // over, and it is marked unhealthy.
    fast.stop().await;
    for _ in 0..3 {
        let resp = client
            .get(proxy.url("/v1/models"))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), 200);
    }
    wait_health(&client, &proxy, fast_addr, 0).await;
    // Bring it back on the same port: probes take it back in.
    let fast = FakeUpstream::on(
        TcpListener::bind(fast_addr).await.expect("rebind"),
        |_| async { json(r#"{"from":"fast"}"#) },
    );
    wait_health(&client, &proxy, fast_addr, 1).await;
    drop(fast);
}

#[tokio::test]
async fn graceful_shutdown_drains_in_flight_requests() {
    // The upstream answers only when released: the request is in flight for as long as the
    // test needs, whatever the machine's speed.
    let arrived = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(Semaphore::new(0));
    let (a, r) = (arrived.clone(), release.clone());
    let up = FakeUpstream::start(move |req| {
        let (a, r) = (a.clone(), r.clone());
        async move {
            if req.uri().path() == "/v1/models" {
                a.fetch_add(1, Ordering::SeqCst);
                if let Ok(p) = r.acquire().await {
                    p.forget();
                }
            }
            json(r#"{"done":true}"#)
        }
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
    wait_until(
        "the request reaching the upstream",
        Duration::from_secs(10),
        async || arrived.load(Ordering::SeqCst) == 1,
    )
    .await;
    proxy.stop();
    // The drain has begun (the listener is closed) while the request is still in flight.
    let addr = proxy.addr;
    wait_until(
        "recache closing its listener after stop()",
        Duration::from_secs(10),
        async || tokio::net::TcpStream::connect(addr).await.is_err(),
    )
    .await;
    assert!(
        !in_flight.is_finished(),
        "the in-flight request ended before the upstream answered (the drain cut it)"
    );
    release.add_permits(1);
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
