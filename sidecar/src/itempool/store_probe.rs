//! Whether the item pool's store answers (`--rank-pool-store`), for `/ready` and a gauge: a
//! TCP connect to its address now and then, off the request path.
//!
//! The store is the engines' connectors' to use; recache only reports on it. A store that is
//! down costs recomputing the cold items (the connectors count the failed reads, reported in
//! `recache_rank_pool_store_reads`), never an answer, so `/ready` stays ready and says so in
//! its `store` detail.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::IntGauge;
use serde_json::{Value, json};

/// How often `recache serve` probes.
pub const PROBE_EVERY: Duration = Duration::from_secs(5);

/// How long one probe waits for the connect.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The `host:port` a `--rank-pool-store` value names: Mooncake's master as `host:port`, or a
/// Redis (Valkey) server as `redis://host:port[/db]`; None when it names neither.
pub fn address(spec: &str) -> Option<String> {
    let rest = match spec.split_once("://") {
        Some(("redis", rest)) => rest.split('/').next().unwrap_or(rest),
        Some(_) => return None,
        None => spec,
    };
    let (host, port) = rest.rsplit_once(':')?;
    (!host.is_empty() && port.parse::<u16>().is_ok()).then(|| rest.to_string())
}

#[derive(Debug, Default, Clone)]
struct Seen {
    /// None until the first probe ends.
    reachable: Option<bool>,
    error: Option<String>,
}

pub struct StoreProbe {
    addr: String,
    seen: Mutex<Seen>,
    up: IntGauge,
}

impl StoreProbe {
    /// Probes the store `spec` names ([`address`]; a value it refuses is probed as given, and
    /// fails, which `/ready` then shows).
    pub fn new(spec: &str, registry: &crate::metrics::Metrics) -> Result<Self, prometheus::Error> {
        let addr = address(spec).unwrap_or_else(|| spec.to_string());
        let up = registry.add(IntGauge::new(
            "rank_pool_store_up",
            "1 when the item pool's store (--rank-pool-store) accepted recache's last probe connect, 0 when not",
        )?)?;
        Ok(Self {
            addr,
            seen: Mutex::new(Seen::default()),
            up,
        })
    }

    /// One probe: a TCP connect within [`PROBE_TIMEOUT`].
    pub async fn check(&self) -> bool {
        let dial = tokio::net::TcpStream::connect(&self.addr);
        let error = match tokio::time::timeout(PROBE_TIMEOUT, dial).await {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("connect timed out after {PROBE_TIMEOUT:?}")),
        };
        let ok = error.is_none();
        if let Some(e) = &error {
            tracing::warn!(store = %self.addr, error = %e, "item pool store unreachable: cold items are computed");
        }
        self.up.set(ok as i64);
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Seen {
            reachable: Some(ok),
            error,
        };
        ok
    }

    /// Probes every `every` in the background until the runtime stops.
    pub fn spawn(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                me.check().await;
                tokio::time::sleep(every).await;
            }
        })
    }

    /// `/ready`'s `store` detail.
    pub fn detail(&self) -> Value {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        json!({"addr": self.addr, "reachable": seen.reachable, "error": seen.error})
    }
}

#[cfg(test)]
#[path = "store_probe_tests.rs"]
mod tests;
