//! recache's client connections on the wire, raw bytes in and out: the lean HTTP/1 path keeps
//! a connection alive across requests (pipelined ones too), hands a connection to hyper at the
//! first request it does not take (recache's own routes, chunked bodies, HTTP/1.0) with the
//! bytes already read intact, honours `connection: close`, and streams an answer chunk by
//! chunk as it comes.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use support::{FakeUpstream, TestProxy, UpBody};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// An upstream that answers with the request's method, path and body.
async fn echo() -> FakeUpstream {
    FakeUpstream::start(|req| async move {
        let what = format!("{} {}", req.method(), req.uri());
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = format!("{what} {}", String::from_utf8_lossy(&body));
        Response::builder()
            .header("content-type", "text/plain")
            .body(support::body(text))
            .expect("response")
    })
    .await
}

/// Reads from `conn` until `n` answers (by their `HTTP/1.` status lines) are complete per
/// their content-length, or the connection closes; returns the text.
async fn read_answers(conn: &mut TcpStream, n: usize) -> String {
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let done = |t: &str| complete_answers(t) >= n;
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        while !done(&text) {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(k) => text.push_str(&String::from_utf8_lossy(&buf[..k])),
            }
        }
    })
    .await;
    text
}

fn complete_answers(text: &str) -> usize {
    let mut count = 0;
    let mut rest = text;
    while let Some(start) = rest.find("HTTP/1.") {
        let msg = &rest[start..];
        let Some(end) = msg.find("\r\n\r\n") else {
            break;
        };
        let head = msg[..end].to_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if msg.len() < end + 4 + len {
            break;
        }
        count += 1;
        rest = &msg[end + 4 + len..];
    }
    count
}

#[tokio::test]
async fn pipelined_requests_on_one_connection_are_answered_in_order() {
    let up = echo().await;
    let proxy = TestProxy::start(&[up.url()], |_| {}).await;
    let mut conn = TcpStream::connect(proxy.addr).await.expect("connect");
    conn.write_all(
        b"POST /v1/a HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\none\
          GET /v1/b?q=1 HTTP/1.1\r\nhost: x\r\n\r\n\
          POST /v1/c HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nthree",
    )
    .await
    .expect("write");
    let text = read_answers(&mut conn, 3).await;
    let a = text.find("POST /v1/a one").expect(&text);
    let b = text.find("GET /v1/b?q=1 ").expect(&text);
    let c = text.find("POST /v1/c three").expect(&text);
    assert!(a < b && b < c, "{text}");
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 3, "{text}");
    assert!(text.to_lowercase().contains("date: "), "{text}");
}

#[tokio::test]
async fn a_request_the_lean_path_does_not_take_hands_the_connection_to_hyper() {
    let up = echo().await;
    let proxy = TestProxy::start(&[up.url()], |_| {}).await;
    proxy.wait_ready().await;
    let mut conn = TcpStream::connect(proxy.addr).await.expect("connect");
    // Proxied, then recache's own route, a chunked body and a proxied one again: after the
    // hand-over hyper serves them all on the same connection.
    conn.write_all(
        b"GET /v1/first HTTP/1.1\r\nhost: x\r\n\r\n\
          GET /health HTTP/1.1\r\nhost: x\r\n\r\n\
          POST /v1/chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n\
          4\r\nabcd\r\n0\r\n\r\n\
          GET /v1/last HTTP/1.1\r\nhost: x\r\n\r\n",
    )
    .await
    .expect("write");
    let text = read_answers(&mut conn, 4).await;
    let order = [
        "GET /v1/first ",
        r#"{"status":"ok"}"#,
        "POST /v1/chunked abcd",
        "GET /v1/last ",
    ];
    let mut at = 0;
    for want in order {
        let found = text[at..]
            .find(want)
            .unwrap_or_else(|| panic!("{want} in {text}"));
        at += found + want.len();
    }
}

#[tokio::test]
async fn http_1_0_and_connection_close_are_answered_then_closed() {
    let up = echo().await;
    let proxy = TestProxy::start(&[up.url()], |_| {}).await;
    for req in [
        &b"GET /v1/old HTTP/1.0\r\n\r\n"[..],
        b"GET /v1/closing HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    ] {
        let mut conn = TcpStream::connect(proxy.addr).await.expect("connect");
        conn.write_all(req).await.expect("write");
        let mut text = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut text)).await;
        assert!(read.is_ok(), "connection left open");
        let text = String::from_utf8_lossy(&text);
        assert!(text.contains(" 200 OK"), "{text}");
        assert!(text.contains("GET /v1/"), "{text}");
    }
}

#[tokio::test]
async fn a_streamed_answer_reaches_the_client_chunk_by_chunk() {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let rx = std::sync::Arc::new(tokio::sync::Mutex::new(Some(rx)));
    let up = FakeUpstream::start(move |_| {
        let rx = rx.clone();
        async move {
            let Some(rx) = rx.lock().await.take() else {
                return support::json("{}");
            };
            let stream = futures_util_stream(rx);
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(stream)
                .expect("response")
        }
    })
    .await;
    let proxy = TestProxy::start(&[up.url()], |_| {}).await;
    let mut conn = TcpStream::connect(proxy.addr).await.expect("connect");
    conn.write_all(b"POST /v1/events HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .expect("write");
    tx.send(Bytes::from_static(b"data: one\n\n"))
        .await
        .expect("send");
    let mut text = String::new();
    // The first event arrives while the upstream still holds the stream open.
    read_until(&mut conn, &mut text, |t| t.contains("data: one")).await;
    assert!(
        text.to_lowercase().contains("transfer-encoding: chunked"),
        "{text}"
    );
    tx.send(Bytes::from_static(b"data: two\n\n"))
        .await
        .expect("send");
    drop(tx);
    read_until(&mut conn, &mut text, |t| t.ends_with("0\r\n\r\n")).await;
    assert!(text.contains("data: two"), "{text}");
}

/// Appends what `conn` sends to `text` until `done(text)`; fails after 5 s or at a close.
async fn read_until(conn: &mut TcpStream, text: &mut String, done: impl Fn(&str) -> bool) {
    let mut buf = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(5), async {
        while !done(text) {
            let k = conn.read(&mut buf).await.expect("read");
            assert!(k > 0, "closed early: {text}");
            text.push_str(&String::from_utf8_lossy(&buf[..k]));
        }
    })
    .await
    .expect("answer in time");
}

/// A body that yields what `rx` receives, ending when it closes.
fn futures_util_stream(rx: tokio::sync::mpsc::Receiver<Bytes>) -> UpBody {
    struct Stream(tokio::sync::mpsc::Receiver<Bytes>);
    impl http_body::Body for Stream {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, std::io::Error>>> {
            self.0
                .poll_recv(cx)
                .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
        }
    }
    Stream(rx).boxed()
}

#[tokio::test]
async fn a_head_over_the_limit_gets_431_even_when_it_arrives_whole() {
    let up = echo().await;
    let proxy = TestProxy::start(&[up.url()], |a| {
        a.limits.max_header_bytes = Some(16 * 1024);
    })
    .await;
    let mut conn = TcpStream::connect(proxy.addr).await.expect("connect");
    // A large body first grows the connection's buffer, so the next head (over the limit)
    // can be read in one piece.
    let mut bytes = b"POST /v1/big HTTP/1.1\r\nhost: x\r\ncontent-length: 65536\r\n\r\n".to_vec();
    bytes.extend(std::iter::repeat_n(b'a', 65536));
    bytes.extend_from_slice(b"GET /v1/next HTTP/1.1\r\nhost: x\r\nx-pad: ");
    bytes.extend(std::iter::repeat_n(b'b', 20 * 1024));
    bytes.extend_from_slice(b"\r\n\r\n");
    conn.write_all(&bytes).await.expect("write");
    let mut text = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut text)).await;
    assert!(read.is_ok(), "connection left open");
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.starts_with("HTTP/1.1 200 OK"),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(
        text.contains("HTTP/1.1 431 "),
        "{}",
        &text[text.len().saturating_sub(300)..]
    );
}
