//! Message heads: a request head written into a buffer, an answer head parsed (httparse) into
//! an [`http::Response`] and the framing of the body that follows it (RFC 9112 §6.3).

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::header::{CONNECTION, CONTENT_LENGTH, HeaderName, HeaderValue, TRANSFER_ENCODING};
use http::{HeaderMap, Method, Response, StatusCode, Version};

use super::{H1Error, Outbound};

/// Answer heads with more header lines than this are refused.
const MAX_HEADERS: usize = 128;

/// How the answer's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (an answer to HEAD, 204, 304).
    Empty,
    /// `content-length` bytes.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
    /// Until the upstream closes the connection (no length given).
    UntilClose,
    /// A 1xx interim answer: another head follows.
    Interim,
}

/// Appends the head of `req` to `out`: request line, `host`, the headers, and the body's
/// length when there is a body or the method carries one.
pub fn encode(req: &Outbound<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(req.target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(req.host.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in req.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    // As hyper does: a length for any body, and `0` for methods that define one (a POST
    // without a length would leave the engine waiting for a body that never comes).
    let bodied = matches!(*req.method, Method::POST | Method::PUT | Method::PATCH);
    if !req.body.is_empty() || bodied {
        out.extend_from_slice(b"content-length: ");
        let mut n = itoa::Buffer::new();
        out.extend_from_slice(n.format(req.body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Parses an answer head at the start of `buf`: None while incomplete, else the answer
/// without its body, the body's framing and whether the connection may carry another call
/// (HTTP/1.1 without `connection: close`; HTTP/1.0 only with `keep-alive`) (`method` is the request's: an answer to HEAD has
/// no body whatever its headers say). A complete head is split off `buf`; its header values
/// are slices of it, not copies.
pub fn parse(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<(Response<()>, Framing, bool)>, H1Error> {
    // Uninitialised slots: zeroing 128 of them per answer would cost more than parsing.
    let mut lines = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut parsed = httparse::Response::new(&mut []);
    let used = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut parsed,
        buf,
        &mut lines,
    ) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(H1Error::Parse("too many header lines"));
        }
        Err(_) => return Err(H1Error::Parse("not an HTTP/1 answer head")),
    };
    let code = parsed.code.ok_or(H1Error::Parse("no status"))?;
    let status = StatusCode::from_u16(code).map_err(|_| H1Error::Parse("bad status code"))?;
    let version = if parsed.version == Some(0) {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    let base = buf.as_ptr() as usize;
    let mut names = Vec::with_capacity(parsed.headers.len());
    for h in parsed.headers.iter() {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|_| H1Error::Parse("bad header name"))?;
        let at = h.value.as_ptr() as usize - base;
        names.push((name, at, at + h.value.len()));
    }
    let head = buf.split_to(used).freeze();
    let mut headers = HeaderMap::with_capacity(names.len());
    // What framing and keep-alive need, noted on the way (no lookups afterwards).
    let mut seen = Seen::default();
    for (name, from, to) in names {
        let value = HeaderValue::from_maybe_shared(head.slice(from..to))
            .map_err(|_| H1Error::Parse("bad header value"))?;
        seen.note(&name, &value)?;
        headers.append(name, value);
    }
    let framing = seen.framing(status, method);
    let mut resp = Response::new(());
    *resp.status_mut() = status;
    *resp.version_mut() = version;
    *resp.headers_mut() = headers;
    let keep = match version {
        Version::HTTP_10 => seen.keep_alive,
        _ => !seen.close,
    };
    Ok(Some((resp, framing?, keep)))
}

/// The headers that decide an answer's framing and whether its connection may be reused.
#[derive(Default)]
struct Seen {
    /// `transfer-encoding`: whether its last coding is chunked.
    chunked: Option<bool>,
    length: Option<u64>,
    close: bool,
    keep_alive: bool,
}

impl Seen {
    fn note(&mut self, name: &HeaderName, value: &HeaderValue) -> Result<(), H1Error> {
        if name == TRANSFER_ENCODING {
            // Chunked must be the final coding; anything else is read until close (§6.3).
            let last = value.to_str().ok().and_then(|v| v.rsplit(',').next());
            self.chunked = Some(last.is_some_and(|l| l.trim().eq_ignore_ascii_case("chunked")));
        } else if name == CONTENT_LENGTH {
            let n = value
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or(H1Error::Parse("bad content-length"))?;
            if self.length.is_some_and(|l| l != n) {
                return Err(H1Error::Parse("conflicting content-length"));
            }
            self.length = Some(n);
        } else if name == CONNECTION {
            for token in value.as_bytes().split(|&b| b == b',') {
                let token = token.trim_ascii();
                self.close |= token.eq_ignore_ascii_case(b"close");
                self.keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
        Ok(())
    }

    fn framing(&self, status: StatusCode, method: &Method) -> Result<Framing, H1Error> {
        if status == StatusCode::SWITCHING_PROTOCOLS {
            // Never asked for: `upgrade` is not passed on.
            return Err(H1Error::Parse("unrequested protocol switch"));
        }
        if status.is_informational() {
            return Ok(Framing::Interim);
        }
        if *method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            return Ok(Framing::Empty);
        }
        Ok(match (self.chunked, self.length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::UntilClose,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::UntilClose,
        })
    }
}
