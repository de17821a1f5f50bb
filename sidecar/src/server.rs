//! The accept loop. [`run`] serves HTTP/1 and HTTP/2 (cleartext) on an already-bound listener
//! until `shutdown` resolves, then stops accepting, lets in-flight requests finish for up to
//! `--drain-timeout`, and returns.

use std::future::Future;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::service::{AppState, handle};

/// Serves until `shutdown` resolves, then drains. Returns false when the drain deadline passed
/// with requests still in flight.
pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()>,
) -> bool {
    let health = crate::client::health::spawn(state.client.clone());
    // Dropped when serving ends: feeds and canaries stop with the server.
    let _mirrors = crate::client::mirror::start(
        &state.client,
        &state.config.route_events,
        state.config.route_canary,
    );
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Usually EMFILE: back off briefly instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                let service = service_fn(move |req| handle(state.clone(), req));
                let builder = auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    let open = graceful.count();
    tracing::info!(
        open_connections = open,
        "shutting down: draining in-flight requests"
    );
    let drained = tokio::select! {
        () = graceful.shutdown() => true,
        () = tokio::time::sleep(state.config.drain_timeout) => {
            tracing::warn!("drain deadline passed with requests still in flight");
            false
        }
    };
    health.shutdown().await;
    drained
}
