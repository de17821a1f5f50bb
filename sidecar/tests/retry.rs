//! What the engine client sends again, and what it never does: a replica that dies before
//! answering or answers a server error (5xx) gets the call re-sent once to another healthy
//! replica; a client error (4xx) is the request's fault and is passed on as it is; a call is
//! never sent a third time, nor twice to the same replica.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use http::{Method, Response, StatusCode};
use support::{FakeUpstream, TestProxy, body, error_code, json, post_completion};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// An upstream that reads each POST and closes the connection without a word (an engine
/// dying mid-request), counting them; other requests (health probes) get `{}`.
async fn closing_upstream(posts: Arc<AtomicUsize>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let posts = posts.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = s.read(&mut buf).await;
                if buf.starts_with(b"POST ") {
                    posts.fetch_add(1, Ordering::SeqCst);
                    return; // dropped: closed before answering
                }
                let ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
                let _ = s.write_all(ok.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}")
}

/// An upstream that answers every POST with `status` and a body naming it (counting them);
/// health probes get `{}`.
async fn counting_upstream(status: StatusCode, posts: Arc<AtomicUsize>) -> FakeUpstream {
    FakeUpstream::start(move |req| {
        let posts = posts.clone();
        async move {
            if req.method() != Method::POST {
                return json("{}");
            }
            posts.fetch_add(1, Ordering::SeqCst);
            let text = format!(r#"{{"object":"error","message":"from the {status} upstream"}}"#);
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(body(text))
                .expect("response")
        }
    })
    .await
}

#[tokio::test]
async fn a_replica_that_closes_before_answering_is_retried_once_elsewhere() {
    let posts = Arc::new(AtomicUsize::new(0));
    let bad = closing_upstream(posts.clone()).await;
    let good = FakeUpstream::start(|_| async { json(r#"{"ok":1}"#) }).await;
    let proxy = TestProxy::start(&[bad.clone(), good.url()], |_| {}).await;
    let client = reqwest::Client::new();
    for i in 0..6 {
        let resp = post_completion(&client, &proxy).await;
        assert_eq!(resp.status(), 200, "request {i}");
    }
    assert!(
        posts.load(Ordering::SeqCst) >= 1,
        "the closing replica was never tried first: the test proves nothing"
    );
    // Alone, it fails each request once and the answer says so (no endless resending).
    let alone = TestProxy::start(&[bad], |_| {}).await;
    let before = posts.load(Ordering::SeqCst);
    let resp = post_completion(&client, &alone).await;
    assert_eq!(resp.status(), 502);
    assert_eq!(error_code(resp).await, "upstream_error");
    assert_eq!(
        posts.load(Ordering::SeqCst) - before,
        1,
        "sent once, not resent to itself"
    );
}

#[tokio::test]
async fn a_server_error_is_sent_once_more_elsewhere_and_counted() {
    let posts = Arc::new(AtomicUsize::new(0));
    let bad = counting_upstream(StatusCode::INTERNAL_SERVER_ERROR, posts.clone()).await;
    let good = FakeUpstream::start(|_| async { json(r#"{"ok":1}"#) }).await;
    let proxy = TestProxy::start(&[bad.url(), good.url()], |_| {}).await;
    let client = reqwest::Client::new();
    for i in 0..6 {
        let resp = post_completion(&client, &proxy).await;
        assert_eq!(resp.status(), 200, "request {i}");
    }
    let failed = posts.load(Ordering::SeqCst);
    assert!(
        failed >= 1,
        "the 500 replica was never tried first: the test proves nothing"
    );
    let metrics = client
        .get(proxy.url("/metrics"))
        .send()
        .await
        .expect("metrics");
    let text = metrics.text().await.expect("metrics text");
    let line = format!(r#"kind="server_error",upstream="{}"}} {failed}"#, bad.addr);
    assert!(text.contains(&line), "no `{line}` in /metrics:\n{text}");
}

#[tokio::test]
async fn a_server_error_with_nowhere_else_to_go_is_passed_on_after_one_resend() {
    let (a_posts, b_posts) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let a = counting_upstream(StatusCode::SERVICE_UNAVAILABLE, a_posts.clone()).await;
    let b = counting_upstream(StatusCode::INTERNAL_SERVER_ERROR, b_posts.clone()).await;
    let client = reqwest::Client::new();
    // Alone: the engine's own answer, sent once.
    let alone = TestProxy::start(&[a.url()], |_| {}).await;
    let resp = post_completion(&client, &alone).await;
    assert_eq!(resp.status(), 503);
    let text = resp.text().await.expect("body");
    assert!(
        text.contains("from the 503"),
        "the engine's own body, not {text}"
    );
    assert_eq!(
        a_posts.load(Ordering::SeqCst),
        1,
        "sent once, not resent to itself"
    );
    // Both failing: one re-send, then the second engine's answer (never a third send).
    let both = TestProxy::start(&[a.url(), b.url()], |_| {}).await;
    let resp = post_completion(&client, &both).await;
    assert!(resp.status().is_server_error(), "{}", resp.status());
    let sent = a_posts.load(Ordering::SeqCst) - 1 + b_posts.load(Ordering::SeqCst);
    assert_eq!(sent, 2, "sent to each replica once");
}

#[tokio::test]
async fn a_client_error_is_passed_on_and_never_sent_again() {
    let (bad_posts, good_posts) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let bad = counting_upstream(StatusCode::BAD_REQUEST, bad_posts.clone()).await;
    let good = counting_upstream(StatusCode::OK, good_posts.clone()).await;
    let proxy = TestProxy::start(&[bad.url(), good.url()], |_| {}).await;
    let client = reqwest::Client::new();
    let mut refused = 0;
    for _ in 0..6 {
        let resp = post_completion(&client, &proxy).await;
        refused += usize::from(resp.status() == StatusCode::BAD_REQUEST);
    }
    assert!(
        refused >= 1,
        "the 400 replica was never chosen: the test proves nothing"
    );
    assert_eq!(
        refused,
        bad_posts.load(Ordering::SeqCst),
        "each 400 passed on"
    );
    let sends = bad_posts.load(Ordering::SeqCst) + good_posts.load(Ordering::SeqCst);
    assert_eq!(sends, 6, "one send per request");
}
