//! Background health probing: every `--health-interval`, GET the engine's health route on each
//! replica, concurrently. Two failed probes in a row take a replica out of rotation; a good one
//! takes it back. Calls that fail to connect also take a replica out (see [`super::EngineClient::send`]),
//! so a dead replica is skipped at once and only probes bring it back. With calls in flight,
//! [`BUSY_PROBE_GRACE`] more unanswered probes are forgiven (SGLang on a CPU answers `/health`
//! seconds late mid wide retrieval step: its only replica went out, a 503); refusals get none.

use std::sync::Arc;
use std::time::Duration;

use http::uri::PathAndQuery;
use http::{HeaderMap, Method};
use http_body_util::BodyExt;

use tokio::sync::watch;

use super::EngineClient;
use super::pool::{Call, SendError};
use super::replica::{BUSY_PROBE_GRACE, Replica};
use crate::shutdown::TaskGuard;

/// Starts probing; stops when the guard is shut down or dropped.
pub fn spawn(client: Arc<EngineClient>) -> TaskGuard {
    TaskGuard::spawn(move |stop| probe_loop(client, stop))
}

async fn probe_loop(client: Arc<EngineClient>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(client.settings.health_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Stop first: after a slow round the tick is ready at once too, and an unbiased
        // select would pick another round half of the time, holding shutdown up a round each.
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        // Concurrently, so one slow replica does not delay the others' verdicts.
        let mut probes = tokio::task::JoinSet::new();
        for replica in client.replicas() {
            let (client, replica) = (client.clone(), replica.clone());
            probes.spawn(async move { probe_one(&client, &replica).await });
        }
        // A probe of a hung engine lasts up to its limit; shutdown does not wait for it
        // (returning drops the set, which aborts the probes in flight).
        loop {
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                next = probes.join_next() => if next.is_none() { break },
            }
        }
    }
}

async fn probe_one(client: &EngineClient, replica: &Arc<Replica>) {
    let was = replica.is_healthy();
    let outcome = probe(client, replica).await;
    let busy = outcome.is_none() && replica.in_flight() > 0;
    let healthy = replica.record_probe(outcome == Some(true), busy as u32 * BUSY_PROBE_GRACE);
    let label = replica.label.as_str();
    if was != healthy {
        if healthy {
            tracing::info!(
                upstream = label,
                "upstream is healthy, taken back into rotation"
            );
            // It may have restarted with an empty cache: what the rule remembers sending
            // there no longer holds.
            client.replica_returned(replica);
        } else {
            tracing::warn!(
                upstream = label,
                "upstream failed its health probe, taken out of rotation"
            );
        }
    }
}

/// One health probe of `replica`: a 2xx on the engine's health route within the probe
/// interval (at least 1 s), on one of the replica's pooled connections; `None`: no answer in time.
pub async fn probe(client: &EngineClient, replica: &Replica) -> Option<bool> {
    let pq: Option<PathAndQuery> = client.settings.health_path.parse().ok();
    let limit = client.settings.health_interval.max(Duration::from_secs(1));
    let probe = async {
        let target = replica.origin_for(pq.as_ref());
        let headers = HeaderMap::new();
        let call = Call {
            method: &Method::GET,
            target: &target,
            headers: &headers,
            body: &[],
        };
        let resp = match replica.pool.send(&call, &replica.host, limit).await {
            Ok(resp) => resp,
            Err(SendError::Timeout) => return None,
            Err(_) => return Some(false),
        };
        let ok = resp.status().is_success();
        // Read to its end, so the connection goes back to the pool.
        let _ = resp.into_body().collect().await;
        Some(ok)
    };
    tokio::time::timeout(limit, probe).await.unwrap_or(None)
}

#[cfg(test)]
#[path = "health_tests.rs"]
mod tests;
