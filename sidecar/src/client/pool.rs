//! Keep-alive HTTP/1 connections to one replica. Idle connections wait in a stack; a call
//! takes one that is still open (or dials a new one, TCP_NODELAY, under `--connect-timeout`)
//! and gives it back only once the answer's body has been read to its end — a connection
//! whose answer was abandoned half-way is dropped, never reused. No general-purpose pool
//! (keys, lazy connect futures, absolute-form rewriting): one replica, one authority, one
//! stack, which keeps the per-request cost of the engine client small.
//!
//! Each connection carries its own `--upstream-timeout` timer, pushed forward for every call
//! it serves: a later deadline on a registered tokio timer is one atomic update, where a fresh
//! timer per call would register in and leave the timer wheel each time.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::time::{Instant, Sleep};

type Sender = SendRequest<Full<Bytes>>;

/// A connection's deadline timer (see the module doc).
type Timer = Pin<Box<Sleep>>;

/// A connection waiting in the pool, with its timer.
#[derive(Debug)]
struct Idle {
    sender: Sender,
    timer: Timer,
}

/// Idle connections kept per replica; more are closed when they come back.
const MAX_IDLE: usize = 256;

/// Why no connection could be had.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("connect timed out after {0:?} (--connect-timeout)")]
    Timeout(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("HTTP/1 handshake: {0}")]
    Handshake(#[source] hyper::Error),
}

/// One replica's connections.
#[derive(Debug)]
pub struct ConnPool {
    /// `host:port` to dial.
    authority: String,
    connect_timeout: Duration,
    idle: Mutex<Vec<Idle>>,
}

impl ConnPool {
    pub fn new(authority: String, connect_timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            authority,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An open connection: the most recently returned idle one, else a new one.
    pub async fn checkout(self: &Arc<Self>) -> Result<Conn, DialError> {
        loop {
            let Some(Idle { mut sender, timer }) = self.idle().pop() else {
                break;
            };
            if sender.is_closed() {
                continue;
            }
            // Returned only after its answer was read, so it is ready or about to be.
            if sender.is_ready() || sender.ready().await.is_ok() {
                return Ok(self.conn(sender, Some(timer), true));
            }
        }
        Ok(self.conn(self.dial().await?, None, false))
    }

    async fn dial(&self) -> Result<Sender, DialError> {
        let connect = tokio::net::TcpStream::connect(self.authority.as_str());
        let stream = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| DialError::Timeout(self.connect_timeout))??;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(DialError::Handshake)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(sender)
    }

    fn conn(self: &Arc<Self>, sender: Sender, timer: Option<Timer>, reused: bool) -> Conn {
        Conn {
            sender: Some(sender),
            timer,
            pool: self.clone(),
            reused,
            finished: false,
        }
    }
}

/// A connection lent to one call. Back to the pool on drop if [`Conn::finished`] was called.
#[derive(Debug)]
pub struct Conn {
    sender: Option<Sender>,
    timer: Option<Timer>,
    pool: Arc<ConnPool>,
    reused: bool,
    finished: bool,
}

/// A failed send: the request never reached the replica (safe to try elsewhere) or it did.
#[derive(Debug)]
pub enum SendError {
    /// Not sent: dialing a fresh connection failed.
    Dial(DialError),
    Failed(hyper::Error),
    /// No response headers within the call's timeout.
    Timeout,
}

impl Conn {
    /// Sends `req` and waits up to `timeout` for the response headers.
    pub async fn send(
        &mut self,
        req: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<Response<Incoming>, SendError> {
        let deadline = Instant::now() + timeout;
        let Conn {
            sender,
            timer,
            pool,
            reused,
            ..
        } = self;
        let timer = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        timer.as_mut().reset(deadline);
        let sent = Self::send_on(sender, pool, reused, req);
        tokio::pin!(sent);
        tokio::select! {
            biased;
            answer = &mut sent => answer,
            () = timer.as_mut() => Err(SendError::Timeout),
        }
    }

    /// Sends `req`. A reused connection that turns out closed before the request left gets
    /// one fresh connection (the request is handed back unsent, so nothing runs twice).
    async fn send_on(
        sender: &mut Option<Sender>,
        pool: &ConnPool,
        reused: &mut bool,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, SendError> {
        let Some(conn) = sender.as_mut() else {
            return Err(SendError::Dial(DialError::Io(
                std::io::ErrorKind::NotConnected.into(),
            )));
        };
        match conn.try_send_request(req).await {
            Ok(resp) => Ok(resp),
            Err(mut e) => match e.take_message() {
                Some(req) if *reused => {
                    *reused = false;
                    let fresh = pool.dial().await.map_err(SendError::Dial)?;
                    let conn = sender.insert(fresh);
                    conn.send_request(req).await.map_err(SendError::Failed)
                }
                _ => Err(SendError::Failed(e.into_error())),
            },
        }
    }

    /// The answer's body has been read to its end: the connection may serve the next call.
    pub fn finished(&mut self) {
        self.finished = true;
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(sender) = self.sender.take()
            && let Some(timer) = self.timer.take()
            && self.finished
            && !sender.is_closed()
        {
            let mut idle = self.pool.idle();
            if idle.len() < MAX_IDLE {
                idle.push(Idle { sender, timer });
            }
        }
    }
}
