//! Keep-alive HTTP/1 connections to one replica. Idle connections wait in a stack; a call
//! takes one that is still open (or dials a new one, TCP_NODELAY, under `--connect-timeout`)
//! and the answer's body gives it back once read to its end ([`h1::AnswerBody`]) — a
//! connection whose answer was abandoned half-way is dropped, never reused. No general-purpose
//! pool (keys, lazy connect futures, absolute-form rewriting): one replica, one authority, one
//! stack, which keeps the per-request cost of the engine client small.
//!
//! Each connection carries its own `--upstream-timeout` timer, pushed forward for every call
//! it serves: a later deadline on a registered tokio timer is one atomic update, where a fresh
//! timer per call would register in and leave the timer wheel each time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, Response};
use tokio::time::Instant;

use super::h1::{AnswerBody, H1Conn, H1Error, Outbound};

/// Idle connections kept per replica; more are closed when they come back.
const MAX_IDLE: usize = 256;

/// Why no connection could be had.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("connect timed out after {0:?} (--connect-timeout)")]
    Timeout(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// One replica's connections.
#[derive(Debug)]
pub struct ConnPool {
    /// `host:port` to dial.
    authority: String,
    connect_timeout: Duration,
    idle: Mutex<Vec<H1Conn>>,
}

/// A failed send: the request never reached the replica (safe to try elsewhere) or it did.
#[derive(Debug)]
pub enum SendError {
    /// Not sent: dialing a fresh connection failed.
    Dial(DialError),
    Failed(H1Error),
    /// No response headers within the call's timeout.
    Timeout,
}

/// A request to one replica: the origin-form target (its path prefix applied) and the
/// headers to pass on (`host` and the body's length are added here).
pub struct Call<'a> {
    pub method: &'a Method,
    pub target: &'a str,
    pub headers: &'a HeaderMap,
    pub body: &'a [u8],
}

impl ConnPool {
    pub fn new(authority: String, connect_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            authority,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<H1Conn>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An open connection: the most recently returned idle one, else a new one. The bool says
    /// whether it was reused.
    pub async fn checkout(&self) -> Result<(H1Conn, bool), DialError> {
        loop {
            let Some(conn) = self.idle().pop() else { break };
            if conn.still_open() {
                return Ok((conn, true));
            }
        }
        Ok((self.dial().await?, false))
    }

    async fn dial(&self) -> Result<H1Conn, DialError> {
        let connect = tokio::net::TcpStream::connect(self.authority.as_str());
        let stream = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| DialError::Timeout(self.connect_timeout))??;
        let _ = stream.set_nodelay(true);
        Ok(H1Conn::new(stream))
    }

    /// A connection whose last answer was read to its end.
    pub(crate) fn give_back(&self, conn: H1Conn) {
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }

    /// Sends `call` on a connection from the pool and waits up to `timeout` for the answer's
    /// head. A reused connection that fails while the request is written gets one fresh
    /// connection: the engine cannot have acted on a request it did not receive whole.
    pub async fn send(
        self: &Arc<Self>,
        call: &Call<'_>,
        host: &HeaderValue,
        timeout: Duration,
    ) -> Result<Response<AnswerBody>, SendError> {
        let (mut conn, mut reused) = self.checkout().await.map_err(SendError::Dial)?;
        let deadline = Instant::now() + timeout;
        let mut timer = conn
            .timer
            .take()
            .unwrap_or_else(|| Box::pin(tokio::time::sleep_until(deadline)));
        timer.as_mut().reset(deadline);
        let req = Outbound {
            method: call.method,
            target: call.target,
            host,
            headers: call.headers,
            body: call.body,
        };
        let exchange = async move {
            loop {
                match conn.write(&req).await {
                    Ok(()) => break,
                    Err(_) if reused => {
                        reused = false;
                        conn = self.dial().await.map_err(SendError::Dial)?;
                    }
                    Err(e) => return Err(SendError::Failed(e)),
                }
            }
            let (head, framing, keep) = conn
                .read_head(call.method)
                .await
                .map_err(SendError::Failed)?;
            Ok((conn, head, framing, keep))
        };
        let (mut conn, head, framing, keep) = tokio::select! {
            biased;
            done = exchange => done?,
            () = timer.as_mut() => return Err(SendError::Timeout),
        };
        conn.timer = Some(timer);
        let body = AnswerBody::new(conn, self.clone(), framing, keep);
        Ok(head.map(|()| body))
    }
}
