//! Writing a response on the lean HTTP/1 path: the head, then the body's frames as they come.
//! A body whose frames are all ready goes out with its head in one write; a body that has to
//! wait (a stream) has what is buffered flushed before each wait, so every event reaches the
//! client as soon as the engine sent it. Framing: the response's `content-length`, else the
//! body's exact size, else chunked.

use std::pin::Pin;
use std::task::Poll;

use http::header::{CONTENT_LENGTH, HeaderMap};
use http::{Response, StatusCode};
use http_body::Body as _;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::Body;
use crate::client::is_hop_by_hop;

/// Buffered body bytes are written once they reach this much.
const FLUSH_AT: usize = 64 * 1024;

/// How a response ended.
#[derive(Debug)]
pub enum Written {
    /// Sent in full.
    Done,
    /// The body failed part-way: the connection must close (the client sees a truncated
    /// message, as with hyper).
    Broken,
}

/// Writes `resp`; `head_only` for an answer to HEAD, `close` adds `connection: close`.
pub async fn write(
    io: &mut TcpStream,
    out: &mut Vec<u8>,
    resp: Response<Body>,
    head_only: bool,
    close: bool,
) -> std::io::Result<Written> {
    let (parts, mut body) = resp.into_parts();
    out.clear();
    let bodiless = head_only
        || parts.status.is_informational()
        || parts.status == StatusCode::NO_CONTENT
        || parts.status == StatusCode::NOT_MODIFIED;
    let declared = parts.headers.contains_key(CONTENT_LENGTH);
    let chunked = !bodiless && !declared && body.size_hint().exact().is_none();
    head(out, parts.status, &parts.headers, close);
    if !bodiless && !declared && !chunked {
        let n = body.size_hint().exact().unwrap_or(0);
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if bodiless {
        io.write_all(out).await?;
        return Ok(Written::Done);
    }
    loop {
        // Poll once; only when the body must wait is the buffer flushed first.
        let polled =
            std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut body).poll_frame(cx))).await;
        let frame = match polled {
            Poll::Ready(f) => f,
            Poll::Pending => {
                if !out.is_empty() {
                    io.write_all(out).await?;
                    out.clear();
                }
                std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
            }
        };
        match frame {
            None => break,
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue; // trailers are not sent
                };
                if data.is_empty() {
                    continue;
                }
                if chunked {
                    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                    out.extend_from_slice(&data);
                    out.extend_from_slice(b"\r\n");
                } else {
                    out.extend_from_slice(&data);
                }
                if out.len() >= FLUSH_AT {
                    io.write_all(out).await?;
                    out.clear();
                }
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "response body failed part-way");
                if !out.is_empty() {
                    io.write_all(out).await?;
                }
                return Ok(Written::Broken);
            }
        }
    }
    if chunked {
        out.extend_from_slice(b"0\r\n\r\n");
    }
    if !out.is_empty() {
        io.write_all(out).await?;
    }
    Ok(Written::Done)
}

fn head(out: &mut Vec<u8>, status: StatusCode, headers: &HeaderMap, close: bool) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        // The framing and the connection are this hop's to say.
        if is_hop_by_hop(name) {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !headers.contains_key(http::header::DATE) {
        // As hyper's server does; proxied answers carry the engine's.
        out.extend_from_slice(b"date: ");
        date(out);
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
}

/// The HTTP date of now, formatted once a second per thread.
fn date(out: &mut Vec<u8>) {
    use std::cell::RefCell;
    use std::time::{SystemTime, UNIX_EPOCH};
    thread_local! {
        static CACHED: RefCell<(u64, String)> = const { RefCell::new((0, String::new())) };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    CACHED.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != second || c.1.is_empty() {
            *c = (second, httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(c.1.as_bytes());
    });
}
