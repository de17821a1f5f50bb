//! The wire behaviour against a scripted upstream: each framing, keep-alive and when a
//! connection must not be reused, interim answers, malformed answers, the head timeout.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method};
use http_body_util::BodyExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::client::pool::{Call, ConnPool, SendError};

/// An upstream that answers each request it reads on a connection with the next of
/// `answers` (raw bytes), and reports how many connections it accepted and what it read.
async fn upstream(
    answers: Vec<&'static [u8]>,
) -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(usize, Vec<u8>)>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let answers = Arc::new(std::sync::Mutex::new(answers.into_iter()));
        let mut conn_no = 0;
        while let Ok((mut s, _)) = listener.accept().await {
            conn_no += 1;
            let (answers, tx) = (answers.clone(), tx.clone());
            tokio::spawn(async move {
                loop {
                    let Some(req) = read_request(&mut s).await else {
                        return;
                    };
                    let _ = tx.send((conn_no, req));
                    let next = answers.lock().expect("lock").next();
                    let Some(answer) = next else { return };
                    if answer.is_empty() {
                        return; // close without answering
                    }
                    if s.write_all(answer).await.is_err() {
                        return;
                    }
                    if answer.ends_with(b"<close>") {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx)
}

/// Reads one request (head, then a `content-length` body).
async fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.ok()?;
    buf.extend_from_slice(&body);
    Some(buf)
}

/// `method` `/v1/x` with `body` on `pool`, the answer's head within `timeout`.
async fn send(
    pool: &Arc<ConnPool>,
    method: &Method,
    body: &[u8],
    timeout: Duration,
) -> Result<http::Response<crate::client::h1::AnswerBody>, SendError> {
    let headers = HeaderMap::new();
    let c = Call {
        method,
        target: "/v1/x",
        headers: &headers,
        body,
    };
    pool.send(&c, &HeaderValue::from_static("up"), timeout)
        .await
}

async fn call(
    pool: &Arc<ConnPool>,
    method: &Method,
    body: &[u8],
) -> Result<(u16, Vec<u8>), String> {
    let resp = send(pool, method, body, Duration::from_millis(500))
        .await
        .map_err(|e| format!("{e:?}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok((status, body.to_bytes().to_vec()))
}

/// The connection number of each request the upstream has read so far.
fn conns(seen: &mut tokio::sync::mpsc::UnboundedReceiver<(usize, Vec<u8>)>) -> Vec<usize> {
    std::iter::from_fn(|| seen.try_recv().ok().map(|(c, _)| c)).collect()
}

fn pool(addr: String) -> Arc<ConnPool> {
    ConnPool::new(addr, Duration::from_millis(500))
}

#[tokio::test]
async fn each_framing_reads_its_body_and_keeps_the_connection() {
    let (addr, mut seen) = upstream(vec![
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0002\r\nde\r\n0\r\nx-trailer: t\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n",
    ])
    .await;
    let p = pool(addr);
    assert_eq!(
        call(&p, &Method::POST, b"{}").await,
        Ok((200, b"hello".to_vec()))
    );
    assert_eq!(
        call(&p, &Method::GET, b"").await,
        Ok((200, b"abcde".to_vec()))
    );
    assert_eq!(call(&p, &Method::GET, b"").await, Ok((201, b"ok".to_vec())));
    assert_eq!(call(&p, &Method::GET, b"").await, Ok((204, Vec::new())));
    // HEAD: the length describes a body that is not sent.
    assert_eq!(call(&p, &Method::HEAD, b"").await, Ok((200, Vec::new())));
    let mut conns = Vec::new();
    let mut first = Vec::new();
    while let Ok((c, req)) = seen.try_recv() {
        conns.push(c);
        if first.is_empty() {
            first = req;
        }
    }
    assert_eq!(conns, vec![1; 5], "all five calls on one connection");
    let first = String::from_utf8(first).expect("utf8");
    assert!(
        first.starts_with("POST /v1/x HTTP/1.1\r\nhost: up\r\ncontent-length: 2\r\n\r\n{}"),
        "{first}"
    );
}

#[tokio::test]
async fn answers_that_end_the_connection_are_not_reused() {
    let (addr, mut seen) = upstream(vec![
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 1\r\n\r\na<close>",
        b"HTTP/1.1 200 OK\r\n\r\nuntil close<close>",
        b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nb",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nc",
    ])
    .await;
    let p = pool(addr);
    // The `<close>` marker is part of the declared-length body only where it fits.
    assert_eq!(call(&p, &Method::GET, b"").await, Ok((200, b"a".to_vec())));
    assert_eq!(
        call(&p, &Method::GET, b"").await,
        Ok((200, b"until close<close>".to_vec()))
    );
    assert_eq!(call(&p, &Method::GET, b"").await, Ok((200, b"b".to_vec())));
    assert_eq!(call(&p, &Method::GET, b"").await, Ok((200, b"c".to_vec())));
    let conns = conns(&mut seen);
    assert_eq!(conns, vec![1, 2, 3, 4], "a fresh connection after each");
}

#[tokio::test]
async fn a_body_dropped_half_way_takes_its_connection_with_it() {
    let (addr, mut seen) = upstream(vec![
        b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\npartial",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nz",
    ])
    .await;
    let p = pool(addr);
    let resp = send(&p, &Method::GET, b"", Duration::from_millis(500))
        .await
        .expect("head");
    let mut body = resp.into_body();
    let first = body.frame().await.expect("frame").expect("ok");
    assert_eq!(first.into_data().expect("data"), "partial");
    drop(body);
    assert_eq!(call(&p, &Method::GET, b"").await, Ok((200, b"z".to_vec())));
    let conns = conns(&mut seen);
    assert_eq!(conns, vec![1, 2]);
}

#[tokio::test]
async fn broken_answers_are_errors_not_hangs() {
    for (answer, what) in [
        (
            &b"HTTP/1.1 200 OK\r\ncontent-length: 20\r\n\r\nshort<close>"[..],
            "closed",
        ),
        (b"NOT HTTP\r\n\r\n", "not an http/1"),
        (
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nx",
            "conflicting",
        ),
        (
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            "chunk size",
        ),
        (b"", "closed"),
    ] {
        let (addr, _seen) = upstream(vec![answer]).await;
        let got = call(&pool(addr), &Method::GET, b"").await;
        let err = got.expect_err(what).to_lowercase();
        assert!(err.contains(what), "{what}: {err}");
    }
}

#[tokio::test]
async fn no_head_within_the_timeout_is_a_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.expect("accept");
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(s);
    });
    let got = send(&pool(addr), &Method::GET, b"", Duration::from_millis(100)).await;
    assert!(matches!(got, Err(SendError::Timeout)), "{got:?}");
}

#[tokio::test]
async fn a_reused_connection_closed_while_idle_is_replaced() {
    let (addr, mut seen) = upstream(vec![
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na",
        b"",
        b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb",
    ])
    .await;
    let p = pool(addr);
    assert_eq!(call(&p, &Method::GET, b"").await, Ok((200, b"a".to_vec())));
    // The upstream closes its side of the idle connection after reading one more request:
    // send a request that it reads and drops, then check the pool dials afresh.
    let got = call(&p, &Method::GET, b"").await;
    assert!(got.is_err(), "closed without an answer: {got:?}");
    assert_eq!(call(&p, &Method::GET, b"").await, Ok((200, b"b".to_vec())));
    let conns = conns(&mut seen);
    assert_eq!(conns, vec![1, 1, 2]);
}
