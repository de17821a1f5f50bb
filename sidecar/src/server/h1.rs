//! The lean HTTP/1 path for requests recache forwards. A client connection starts here: each
//! request head is parsed in place (httparse), its body of declared length read, the request
//! passed to the same proxy path hyper's server would call ([`crate::service::proxied`]) and
//! the answer written back ([`super::encode`]). That skips, per request, hyper's server
//! state machine, its header map round trip and its write buffering, which were about a third
//! of recache's own cost per proxied request.
//!
//! Anything else — recache's own routes, HTTP/2, HTTP/1.0, chunked or `Expect` request bodies,
//! upgrades, a body over `--max-body-bytes`, a head that does not parse — hands the connection
//! to hyper for the rest of its life, bytes already read included, so those keep exactly their
//! old behaviour (and their errors). The head limits are kept here as hyper keeps them: a head
//! over `--max-header-bytes` gets 431 and the connection closes; `--header-read-timeout`
//! bounds the wait for a head, idle time between requests included.

use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Request, Uri, Version};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use super::encode::{self, Written};
use super::prefixed::Prefixed;
use crate::service::{AppState, Origin};

/// Header lines a request may have on this path (more: hyper's path takes it).
const MAX_HEADERS: usize = 100;

/// A request this path takes, split off the buffer.
struct Head {
    parts: http::request::Parts,
    /// Bytes the head took.
    size: usize,
    body_len: usize,
    close: bool,
}

/// Serves `io` until the client closes, recache shuts down, or a request needs hyper.
pub async fn serve(
    mut io: TcpStream,
    state: Arc<AppState>,
    origin: Origin,
    mut shutdown: watch::Receiver<bool>,
    hyper: super::Handoff,
) {
    let limits = state.config.limits;
    let mut buf = BytesMut::with_capacity(8 * 1024);
    let mut out = Vec::with_capacity(8 * 1024);
    let mut timer: Option<Pin<Box<Sleep>>> = None;
    loop {
        if let Some(t) = limits.header_read_timeout {
            let deadline = Instant::now() + t;
            timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)))
                .as_mut()
                .reset(deadline);
        }
        let head = loop {
            match parse(&mut buf, &state) {
                // A complete head can still be over the limit when it came in one large read.
                Parsed::Take(head) if head.size > limits.max_header_bytes => {
                    return too_large(&mut io).await;
                }
                Parsed::Take(head) => break head,
                Parsed::Hyper => {
                    hyper.serve(Prefixed::new(buf.freeze(), io), shutdown).await;
                    return;
                }
                Parsed::Partial if buf.len() >= limits.max_header_bytes => {
                    return too_large(&mut io).await;
                }
                Parsed::Partial => {}
            }
            if !read_more(&mut io, &mut buf, timer.as_mut(), &mut shutdown).await {
                return;
            }
        };
        while buf.len() < head.body_len {
            buf.reserve(head.body_len - buf.len());
            match io.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        let body = buf.split_to(head.body_len).freeze();
        let head_only = head.parts.method == Method::HEAD;
        let resp = crate::service::proxied(&state, &origin, head.parts, body).await;
        let close = head.close || *shutdown.borrow();
        match encode::write(&mut io, &mut out, resp, head_only, close).await {
            Ok(Written::Done) if !close => {}
            _ => return,
        }
    }
}

/// Waits for more of a head. False when the connection is to close instead: the client
/// closed, the head timer ran out, or recache is shutting down (while nothing of the next
/// head has arrived).
async fn read_more(
    io: &mut TcpStream,
    buf: &mut BytesMut,
    timer: Option<&mut Pin<Box<Sleep>>>,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(8 * 1024);
    }
    let idle = buf.is_empty();
    let timed_out = async {
        match timer {
            Some(t) => t.as_mut().await,
            None => std::future::pending().await,
        }
    };
    let stopping = async {
        if idle && !*shutdown.borrow() {
            // A closed sender also means recache is going away.
            let _ = shutdown.changed().await;
        } else if !idle {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        read = io.read_buf(buf) => matches!(read, Ok(n) if n > 0),
        () = timed_out => false,
        () = stopping => false,
    }
}

/// 431 as hyper's server answers it (no body), then the connection closes.
async fn too_large(io: &mut TcpStream) {
    use tokio::io::AsyncWriteExt;
    let _ = io
        .write_all(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\
              connection: close\r\n\r\n",
        )
        .await;
}

// Built once per request and moved once: boxing the head would add an allocation per request.
#[allow(clippy::large_enum_variant)]
enum Parsed {
    Take(Head),
    Partial,
    Hyper,
}

/// Parses the head at the start of `buf` and decides who serves it.
fn parse(buf: &mut BytesMut, state: &AppState) -> Parsed {
    if buf.is_empty() {
        return Parsed::Partial;
    }
    let mut lines = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut []);
    let used = match httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut req, buf, &mut lines)
    {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Hyper,
    };
    let (Some(method), Some(path), Some(1)) = (req.method, req.path, req.version) else {
        return Parsed::Hyper;
    };
    let Ok(method) = Method::from_bytes(method.as_bytes()) else {
        return Parsed::Hyper;
    };
    if method == Method::CONNECT
        || !path.starts_with('/')
        || crate::service::answers_itself(&method, path)
    {
        return Parsed::Hyper;
    }
    let base = buf.as_ptr() as usize;
    let mut names = Vec::with_capacity(req.headers.len());
    let mut body_len = 0usize;
    let mut close = false;
    for h in req.headers.iter() {
        let Ok(name) = HeaderName::from_bytes(h.name.as_bytes()) else {
            return Parsed::Hyper;
        };
        match name.as_str() {
            // Framing and protocol changes this path does not do: hyper's does.
            "transfer-encoding" | "expect" | "upgrade" => return Parsed::Hyper,
            "content-length" => {
                match std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                {
                    Some(n) if body_len == 0 || body_len == n => body_len = n,
                    _ => return Parsed::Hyper,
                }
            }
            "connection" => {
                close |= h
                    .value
                    .split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
            }
            _ => {}
        }
        // What a header value may hold (as `HeaderValue` checks it), checked before the head
        // is split off: a refusal still leaves the bytes for hyper.
        if !h
            .value
            .iter()
            .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
        {
            return Parsed::Hyper;
        }
        // The host, the length and this hop's connection headers go no further: the engine
        // client writes its own (`client::headers::pass_on` would drop them).
        if name == http::header::HOST
            || name == http::header::CONTENT_LENGTH
            || crate::client::is_hop_by_hop(&name)
        {
            continue;
        }
        let at = h.value.as_ptr() as usize - base;
        names.push((name, at, at + h.value.len()));
    }
    // A body over the limit gets hyper's path's 413.
    if body_len > state.config.max_body_bytes {
        return Parsed::Hyper;
    }
    let Ok(uri) = Uri::from_maybe_shared(Bytes::copy_from_slice(path.as_bytes())) else {
        return Parsed::Hyper;
    };
    let head = buf.split_to(used).freeze();
    let mut headers = HeaderMap::with_capacity(names.len());
    for (name, from, to) in names {
        // Checked above, so this does not fail.
        if let Ok(value) = HeaderValue::from_maybe_shared(head.slice(from..to)) {
            headers.append(name, value);
        }
    }
    let mut parts = Request::new(()).into_parts().0;
    parts.method = method;
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    parts.headers = headers;
    Parsed::Take(Head {
        parts,
        size: used,
        body_len,
        close,
    })
}
