//! Unit tests of `client::health`.

use std::time::Duration;

use super::*;
use crate::client::ClientSettings;
use crate::metrics::Metrics;

/// An engine that accepts connections and never answers: a probe of it lasts its whole
/// limit (here 5 s). Shutting the prober down must not wait for that.
#[tokio::test]
async fn shutdown_does_not_wait_for_a_probe_in_flight() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (probed, mut probing) = tokio::sync::mpsc::unbounded_channel();
    let accepted = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
            let _ = probed.send(());
        }
    });
    let upstream: http::Uri = format!("http://{addr}").parse().expect("uri");
    let settings = ClientSettings {
        connect_timeout: Duration::from_secs(1),
        upstream_timeout: Duration::from_secs(5),
        health_interval: Duration::from_secs(5),
        health_path: "/health",
        routing: Default::default(),
        engine: Default::default(),
        slo: Default::default(),
    };
    let metrics = Metrics::new().expect("metrics");
    let guard = spawn(EngineClient::new(&[upstream], settings, &metrics));
    // The first probe is in flight once its connection is accepted.
    tokio::time::timeout(Duration::from_secs(10), probing.recv())
        .await
        .expect("the first health probe never connected");
    tokio::time::timeout(Duration::from_secs(3), guard.shutdown())
        .await
        .expect("shutdown waited for the probe in flight");
    accepted.abort();
}
