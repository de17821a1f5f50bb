//! recache as a proxy on loopback: what it checks in a request body before the engine sees
//! it (malformed JSON and wrong types get 400, `recache_keep_tokens` is taken out and
//! checked, oversized bodies get 413), none of it reaching the upstream.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::Response;
use support::{FakeUpstream, TestProxy, body, error_code, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// `recache_keep_tokens` tells the shadow cache how much of a prompt to keep; it is recache's
/// field, so it never reaches the engine, and a value that is not a count is a 400.
#[tokio::test]
async fn keep_tokens_is_taken_out_before_forwarding_and_checked() {
    let up = FakeUpstream::start(|req| async move {
        use http_body_util::BodyExt;
        let bytes = req.into_body().collect().await.expect("body").to_bytes();
        Response::builder()
            .status(200)
            .body(body(bytes))
            .expect("resp")
    })
    .await;
    let proxy = TestProxy::start(&[up.url()], |_| {}).await;
    let client = reqwest::Client::new();
    let resp = client
        .post(proxy.url("/v1/completions"))
        .body(r#"{"model":"m","prompt":[1,2,3],"recache_keep_tokens":2}"#)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(v, serde_json::json!({"model": "m", "prompt": [1, 2, 3]}));
    for bad in [r#""two""#, "-1", "1.5", "null"] {
        let resp = client
            .post(proxy.url("/v1/completions"))
            .body(format!(
                r#"{{"model":"m","prompt":[1,2,3],"recache_keep_tokens":{bad}}}"#
            ))
            .send()
            .await
            .expect("send");
        assert_eq!(resp.status(), 400, "{bad}");
        assert_eq!(error_code(resp).await, "invalid_request");
    }
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
