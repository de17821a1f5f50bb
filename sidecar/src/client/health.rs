//! Background health probing: every `--health-interval`, GET the engine's health route on each
//! replica, concurrently. Two failed probes in a row take a replica out of rotation; a good one
//! takes it back. Calls that fail to connect also take a replica out (see [`super::EngineClient::send`]),
//! so a dead replica is skipped at once and only probes bring it back.

use std::sync::Arc;

use tokio::sync::watch;

use super::EngineClient;
use super::replica::Replica;
use crate::shutdown::TaskGuard;

/// Starts probing; stops when the guard is shut down or dropped.
pub fn spawn(client: Arc<EngineClient>) -> TaskGuard {
    TaskGuard::spawn(move |stop| probe_loop(client, stop))
}

async fn probe_loop(client: Arc<EngineClient>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(client.settings.health_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        // Concurrently, so one slow replica does not delay the others' verdicts.
        let mut probes = tokio::task::JoinSet::new();
        for replica in client.replicas() {
            let (client, replica) = (client.clone(), replica.clone());
            probes.spawn(async move { probe_one(&client, &replica).await });
        }
        while probes.join_next().await.is_some() {}
    }
}

async fn probe_one(client: &EngineClient, replica: &Arc<Replica>) {
    let was = replica.is_healthy();
    let healthy = replica.record_probe(client.probe(replica).await);
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
