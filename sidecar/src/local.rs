//! recache serving on loopback inside this process, for benchmarks and tests that need a real
//! server in front of an engine without spawning the binary: bound to `127.0.0.1:0`, run by
//! [`crate::server::run`], stopped gracefully when [`LocalServer::stop`] is called or the value
//! is dropped.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::{ConfigError, ServeArgs};
use crate::service::AppState;

/// Why a local server could not start.
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("binding a loopback port: {0}")]
    Bind(#[source] std::io::Error),
    #[error(transparent)]
    Start(#[from] crate::service::StartError),
}

/// A running in-process recache.
pub struct LocalServer {
    pub addr: SocketAddr,
    pub state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<bool>,
    /// The item pool store's probe (`--rank-pool-store`) and Alg. 1's cost meter, as
    /// `recache serve` runs them.
    probe: Option<JoinHandle<()>>,
    meter: Option<JoinHandle<()>>,
}

impl LocalServer {
    /// Resolves `args` (its `listen` is ignored) and serves on `127.0.0.1:0`.
    pub async fn start(args: &ServeArgs) -> Result<Self, LocalError> {
        let config = args.resolve()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(LocalError::Bind)?;
        let addr = listener.local_addr().map_err(LocalError::Bind)?;
        let state = AppState::new(config)?;
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(crate::server::run(listener, state.clone(), async move {
            let _ = rx.await;
        }));
        let probe = (state.ranker.rank.store.as_ref())
            .map(|p| p.spawn(crate::itempool::store_probe::PROBE_EVERY));
        let meter = (state.ranker.rank.pool.clone()).and_then(|p| {
            let engine = state.ranker.engine.clone();
            crate::itempool::costs::spawn(p, engine, crate::itempool::costs::MEASURE_EVERY)
        });
        Ok(Self {
            addr,
            state,
            stop: Some(tx),
            task,
            probe,
            meter,
        })
    }

    /// `http://127.0.0.1:PORT`
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `base()` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Starts the graceful shutdown (stop accepting, drain).
    pub fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Stops and waits for the drain; false when the drain deadline cut requests off.
    pub async fn stopped(mut self) -> bool {
        self.stop();
        (&mut self.task).await.unwrap_or(false)
    }
}

impl Drop for LocalServer {
    fn drop(&mut self) {
        for task in [self.probe.take(), self.meter.take()].into_iter().flatten() {
            task.abort();
        }
    }
}
