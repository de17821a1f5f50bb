//! An answer's body, read off its connection as the caller polls it. The body owns the
//! connection while it is read; once the body has ended as its framing says (and the answer
//! allowed keep-alive) the connection goes back to its pool. A body dropped before its end
//! drops the connection: half an answer left on the socket must never reach the next call.

use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body as HttpBody, Frame, SizeHint};

use super::head::Framing;
use super::{H1Conn, H1Error};
use crate::client::pool::ConnPool;

/// Where the reader is in the body.
#[derive(Debug, Clone, Copy)]
enum State {
    /// This many bytes of body (or of the current chunk) are still to come.
    Length(u64),
    /// Until the peer closes.
    UntilClose,
    /// Chunked: at a chunk-size line.
    ChunkSize,
    /// Chunked: this many bytes of chunk data left.
    ChunkData(u64),
    /// Chunked: the CRLF after a chunk's data.
    ChunkEnd,
    /// Chunked: trailer lines after the last chunk, up to an empty line.
    Trailers,
    Done,
}

/// Longest chunk-size or trailer line accepted.
const MAX_LINE: usize = 4 * 1024;

/// A replica's answer body (see the module doc).
#[derive(Debug)]
pub struct AnswerBody {
    conn: Option<H1Conn>,
    pool: Option<Arc<ConnPool>>,
    state: State,
    /// The answer allowed the connection to serve another call.
    reusable: bool,
}

impl AnswerBody {
    pub(crate) fn new(conn: H1Conn, pool: Arc<ConnPool>, framing: Framing, reusable: bool) -> Self {
        let state = match framing {
            Framing::Empty | Framing::Interim => State::Done,
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::ChunkSize,
            Framing::UntilClose => State::UntilClose,
        };
        let reusable = reusable && !matches!(state, State::UntilClose);
        let mut body = Self {
            conn: Some(conn),
            pool: Some(pool),
            state,
            reusable,
        };
        if matches!(body.state, State::Done) {
            body.release();
        }
        body
    }

    /// The body has ended: the connection goes back when it may carry another call.
    fn release(&mut self) {
        if let (Some(conn), Some(pool)) = (self.conn.take(), self.pool.take())
            && self.reusable
            && conn.buf.is_empty()
        {
            pool.give_back(conn);
        }
    }

    fn fail(&mut self, e: H1Error) -> Poll<Option<Result<Frame<Bytes>, H1Error>>> {
        self.state = State::Done;
        self.conn = None;
        Poll::Ready(Some(Err(e)))
    }
}

/// Reads more from the socket into `conn.buf`; Ready(0) at the peer's close.
fn poll_fill(conn: &mut H1Conn, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
    if conn.buf.capacity() - conn.buf.len() < 1024 {
        conn.buf.reserve(16 * 1024);
    }
    loop {
        match conn.io.try_read_buf(&mut conn.buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                ready!(conn.io.poll_read_ready(cx))?;
            }
            other => return Poll::Ready(other),
        }
    }
}

/// Index just past the first CRLF in `buf` (the line without it is `..i - 2`).
fn line_end(buf: &BytesMut) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n").map(|i| i + 2)
}

fn chunk_size(line: &[u8]) -> Option<u64> {
    // Chunk extensions (`;name=value`) are allowed and ignored.
    let digits = line.split(|&b| b == b';').next()?;
    let digits = std::str::from_utf8(digits).ok()?.trim();
    if digits.is_empty() || digits.len() > 15 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

impl HttpBody for AnswerBody {
    type Data = Bytes;
    type Error = H1Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, H1Error>>> {
        let this = &mut *self;
        loop {
            let Some(conn) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            match this.state {
                State::Done => {
                    this.release();
                    return Poll::Ready(None);
                }
                State::Length(left) | State::ChunkData(left) if !conn.buf.is_empty() => {
                    let take = conn
                        .buf
                        .len()
                        .min(usize::try_from(left).unwrap_or(usize::MAX));
                    let data = conn.buf.split_to(take).freeze();
                    let left = left - take as u64;
                    this.state = match this.state {
                        State::Length(_) if left == 0 => State::Done,
                        State::Length(_) => State::Length(left),
                        _ if left == 0 => State::ChunkEnd,
                        _ => State::ChunkData(left),
                    };
                    if matches!(this.state, State::Done) {
                        // Hand the connection back before the caller sees the last bytes.
                        this.release();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                State::UntilClose if !conn.buf.is_empty() => {
                    let data = conn.buf.split().freeze();
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                State::ChunkSize | State::Trailers if line_end(&conn.buf).is_some() => {
                    let end = line_end(&conn.buf).unwrap_or_default();
                    let line = conn.buf.split_to(end);
                    let line = &line[..end - 2];
                    this.state = match this.state {
                        State::ChunkSize => match chunk_size(line) {
                            Some(0) => State::Trailers,
                            Some(n) => State::ChunkData(n),
                            None => return this.fail(H1Error::Parse("bad chunk size")),
                        },
                        // Trailers are dropped: nothing recache serves sends any.
                        _ if line.is_empty() => State::Done,
                        _ => State::Trailers,
                    };
                    continue;
                }
                State::ChunkEnd if conn.buf.len() >= 2 => {
                    if &conn.buf[..2] != b"\r\n" {
                        return this.fail(H1Error::Parse("chunk not followed by CRLF"));
                    }
                    conn.buf.advance(2);
                    this.state = State::ChunkSize;
                    continue;
                }
                State::ChunkSize | State::Trailers if conn.buf.len() > MAX_LINE => {
                    return this.fail(H1Error::Parse("chunk line too long"));
                }
                _ => {}
            }
            // Nothing usable buffered: read more.
            match ready!(poll_fill(conn, cx)) {
                Ok(0) if matches!(this.state, State::UntilClose) => {
                    this.state = State::Done;
                    this.conn = None;
                    return Poll::Ready(None);
                }
                Ok(0) => return this.fail(H1Error::Closed),
                Ok(_) => {}
                Err(e) => return this.fail(H1Error::Io(e)),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Done => SizeHint::with_exact(0),
            State::Length(n) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}
