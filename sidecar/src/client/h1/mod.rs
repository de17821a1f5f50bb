//! HTTP/1.1 on one upstream connection, for the only shape of call the engine client makes:
//! one request with a body of known length (written in one `write` when small), then one
//! answer whose head is parsed in place and whose body is read straight off the socket by
//! the task that asked ([`body::AnswerBody`]). No connection task, no channel between the
//! caller and the connection, no request or response state machine beyond the framing the
//! answer declares: that is most of what a general client (hyper's) costs on the proxy's path.
//!
//! What it does not do, and need not: pipelining (one call at a time per connection),
//! upgrades (`upgrade` is hop-by-hop and never passed on), `Expect: 100-continue` (the body
//! is sent with the head; a stray 1xx answer is skipped).

pub mod body;
mod head;

use std::pin::Pin;

use bytes::BytesMut;
use http::{HeaderMap, HeaderValue, Method, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Sleep;

pub use self::body::AnswerBody;
pub use self::head::Framing;

/// A response head larger than this is refused (hyper's client allows about as much).
pub const MAX_HEAD: usize = 64 * 1024;

/// Bodies up to this size are copied behind the head and written in one call.
const ONE_WRITE_BELOW: usize = 64 * 1024;

/// What went wrong on the wire.
#[derive(Debug, thiserror::Error)]
pub enum H1Error {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("connection closed before the answer was complete")]
    Closed,
    #[error("malformed answer: {0}")]
    Parse(&'static str),
    #[error("answer head over {MAX_HEAD} bytes")]
    HeadTooLarge,
}

/// One open connection to a replica, idle or lent to a call.
#[derive(Debug)]
pub struct H1Conn {
    pub(crate) io: TcpStream,
    /// Bytes read and not yet consumed (an answer's head, then its body).
    pub(crate) buf: BytesMut,
    /// The request being written (kept to reuse its allocation).
    out: Vec<u8>,
    /// The `--upstream-timeout` timer, reset per call (see `pool`'s module doc).
    pub(crate) timer: Option<Pin<Box<Sleep>>>,
}

/// A request as the engine client sends it: origin-form target, headers already filtered.
pub struct Outbound<'a> {
    pub method: &'a Method,
    pub target: &'a str,
    pub host: &'a HeaderValue,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

impl H1Conn {
    pub fn new(io: TcpStream) -> Self {
        Self {
            io,
            buf: BytesMut::with_capacity(8 * 1024),
            out: Vec::with_capacity(1024),
            timer: None,
        }
    }

    /// Whether an idle connection is still usable: the peer has not closed it and has sent
    /// nothing unasked. One non-blocking read, which also clears a stale readiness.
    pub fn still_open(&self) -> bool {
        let mut probe = [0u8; 1];
        matches!(self.io.try_read(&mut probe), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// Writes the request. Nothing of the answer is read yet.
    pub async fn write(&mut self, req: &Outbound<'_>) -> Result<(), H1Error> {
        self.out.clear();
        head::encode(req, &mut self.out);
        if req.body.len() < ONE_WRITE_BELOW {
            self.out.extend_from_slice(req.body);
            self.io.write_all(&self.out).await?;
        } else {
            self.io.write_all(&self.out).await?;
            self.io.write_all(req.body).await?;
        }
        Ok(())
    }

    /// Reads the answer's head (skipping 1xx interim answers); the body stays on the socket.
    /// The bool: whether the answer lets the connection serve another call.
    pub async fn read_head(
        &mut self,
        method: &Method,
    ) -> Result<(Response<()>, Framing, bool), H1Error> {
        self.buf.clear();
        loop {
            if !self.buf.is_empty() {
                match head::parse(&mut self.buf, method)? {
                    Some((_, Framing::Interim, _)) => continue,
                    Some(answer) => return Ok(answer),
                    None if self.buf.len() >= MAX_HEAD => return Err(H1Error::HeadTooLarge),
                    None => {}
                }
            }
            if self.buf.capacity() - self.buf.len() < 1024 {
                self.buf.reserve(8 * 1024);
            }
            if self.io.read_buf(&mut self.buf).await? == 0 {
                return Err(H1Error::Closed);
            }
        }
    }
}

#[cfg(test)]
mod tests;
