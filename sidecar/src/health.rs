//! Background health probing: every `--health-interval`, GET the engine's health route on each
//! upstream. Two failed probes in a row take the upstream out of rotation; a good one takes it
//! back in.
//! Requests that fail to connect also take an upstream out (see `proxy`), so a dead replica is
//! skipped at once and only probes bring it back.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use tokio::sync::watch;

use crate::service::AppState;
use crate::upstream::Upstream;

/// Probes until `shutdown` flips to true.
pub async fn probe_loop(state: Arc<AppState>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(state.config.health_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        // Probe replicas concurrently so one slow replica does not delay the others' verdicts.
        let mut probes = tokio::task::JoinSet::new();
        for upstream in state.upstreams.all() {
            let (state, upstream) = (state.clone(), upstream.clone());
            probes.spawn(async move { probe_one(&state, &upstream).await });
        }
        while probes.join_next().await.is_some() {}
    }
}

async fn probe_one(state: &AppState, upstream: &Arc<Upstream>) {
    let was = upstream.is_healthy();
    let healthy = upstream.record_probe(probe(state, upstream).await);
    let label = upstream.label.as_str();
    if was != healthy {
        if healthy {
            tracing::info!(
                upstream = label,
                "upstream is healthy, taken back into rotation"
            );
        } else {
            tracing::warn!(
                upstream = label,
                "upstream failed its health probe, taken out of rotation"
            );
        }
    }
    state
        .metrics
        .upstream_healthy
        .with_label_values(&[label])
        .set(i64::from(healthy));
}

async fn probe(state: &AppState, upstream: &Upstream) -> bool {
    let path = state.config.engine.health_path().parse().ok();
    let Ok(uri) = upstream.uri_for(path.as_ref()) else {
        return false;
    };
    let Ok(req) = Request::builder()
        .method(Method::GET)
        .uri(uri)
        .body(Full::new(Bytes::new()))
    else {
        return false;
    };
    // A probe that takes longer than the interval (at least 1 s) counts as a failure.
    let limit = state.config.health_interval.max(Duration::from_secs(1));
    match tokio::time::timeout(limit, state.client.request(req)).await {
        Ok(Ok(resp)) => resp.status().is_success(),
        _ => false,
    }
}
