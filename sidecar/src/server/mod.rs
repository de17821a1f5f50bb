//! The accept loop. [`run`] serves HTTP/1 and HTTP/2 (cleartext) on an already-bound listener
//! (and [`run_with_admin`] on the `--admin-listen` one beside it) until `shutdown` resolves,
//! then stops accepting, lets in-flight requests finish for up to `--drain-timeout`, and
//! returns. Both HTTP servers enforce the request-head limits of [`crate::limits`]: a head
//! over `--max-header-bytes` gets 431, one not complete within `--header-read-timeout` has
//! its connection closed.
//!
//! A connection to the main port starts on the lean HTTP/1 path ([`h1`]), which forwards
//! plain proxied requests itself and hands the connection to hyper (HTTP/1 and HTTP/2) at the
//! first request it does not take; the admin port is hyper's throughout.

mod encode;
mod h1;
mod prefixed;

use std::future::Future;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::limits::Limits;
use crate::service::{AppState, Origin, Port, handle};

/// Serves until `shutdown` resolves, then drains. Returns false when the drain deadline passed
/// with requests still in flight.
pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) -> bool {
    run_with_admin(listener, None, state, shutdown).await
}

/// [`run`], with the admin API on `admin` (bound from `--admin-listen`) when given.
pub async fn run_with_admin(
    listener: TcpListener,
    admin: Option<TcpListener>,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let health = crate::client::health::spawn(state.client.clone());
    // A replica back in rotation may have restarted: its item pool is reconciled.
    let _pool_resync =
        crate::itempool::resync::spawn(state.ranker.rank.pool.clone(), state.ranker.engine.clone());
    // Dropped when serving ends: feeds and canaries stop with the server.
    let _mirrors = crate::client::mirror::start(
        &state.client,
        &state.config.route_events,
        state.config.route_canary,
    );
    // Every connection's task holds a receiver: `true` asks it to finish its request and
    // close, and the drain is over when the last one has gone.
    let (stop, stopping) = watch::channel(false);
    let builder = Arc::new(http_builder(state.config.limits));
    tokio::pin!(shutdown);
    loop {
        let admin_accept = async {
            match &admin {
                Some(l) => l.accept().await,
                None => std::future::pending().await,
            }
        };
        let (accepted, port) = tokio::select! {
            accepted = listener.accept() => (accepted, Port::Main),
            accepted = admin_accept => (accepted, Port::Admin),
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                // Usually EMFILE: back off briefly instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let origin = Origin::new(&state, port, peer.ip());
        let hyper = Handoff {
            builder: builder.clone(),
            state: state.clone(),
            origin: origin.clone(),
        };
        let stopping = stopping.clone();
        match port {
            Port::Main => {
                let state = state.clone();
                tokio::spawn(h1::serve(stream, state, origin, stopping, hyper))
            }
            Port::Admin => tokio::spawn(hyper.serve(stream, stopping)),
        };
    }
    drop(listener);
    drop(admin);
    drop(stopping);
    stop.send_replace(true);
    let open = stop.receiver_count();
    tracing::info!(
        open_connections = open,
        "shutting down: draining in-flight requests"
    );
    let drained = tokio::select! {
        () = stop.closed() => true,
        () = tokio::time::sleep(state.config.drain_timeout) => {
            tracing::warn!("drain deadline passed with requests still in flight");
            false
        }
    };
    health.shutdown().await;
    drained
}

/// What serving a connection with hyper takes (the admin port, and main-port connections the
/// lean path hands over).
pub(crate) struct Handoff {
    builder: Arc<auto::Builder<TokioExecutor>>,
    state: Arc<AppState>,
    origin: Origin,
}

impl Handoff {
    /// Serves `io` with hyper until it closes; once `stopping` turns true, hyper finishes the
    /// request in flight and closes.
    async fn serve<I>(self, io: I, mut stopping: watch::Receiver<bool>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Self {
            builder,
            state,
            origin,
        } = self;
        let service = service_fn(move |req| handle(state.clone(), origin.clone(), req));
        let conn = builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(conn);
        let stop = async {
            while !*stopping.borrow_and_update() {
                if stopping.changed().await.is_err() {
                    break;
                }
            }
        };
        let ended = tokio::select! {
            ended = conn.as_mut() => ended,
            () = stop => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = ended {
            tracing::debug!(error = %e, "connection ended with an error");
        }
    }
}

/// The HTTP/1 + HTTP/2 server with the request-head limits applied.
fn http_builder(limits: Limits) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    let mut h1 = builder.http1();
    // The read buffer's cap is the head's cap: hyper refuses (431) a head that does not fit.
    // `--max-header-bytes` is checked to be at least hyper's minimum buffer (8 KiB).
    h1.max_buf_size(limits.max_header_bytes);
    // hyper enforces the head read timeout only with a timer; without one it stays off.
    if let Some(timeout) = limits.header_read_timeout {
        h1.timer(TokioTimer::new()).header_read_timeout(timeout);
    }
    builder
        .http2()
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    builder
}
