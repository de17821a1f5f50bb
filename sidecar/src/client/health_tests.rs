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
        health_interval: Duration::from_secs(5),
        ..probing_settings()
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

/// A listener that accepts connections and never answers: every probe of it times out.
async fn silent_upstream() -> (http::Uri, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    (format!("http://{addr}").parse().expect("uri"), held)
}

fn probing_settings() -> ClientSettings {
    ClientSettings {
        connect_timeout: Duration::from_secs(1),
        upstream_timeout: Duration::from_secs(5),
        health_interval: Duration::from_secs(1),
        health_path: "/health",
        routing: Default::default(),
        engine: Default::default(),
        slo: Default::default(),
    }
}

/// Unanswered probes of a replica with a call in flight do not count (a busy engine answers
/// `/health` late); once nothing is in flight, the same silence takes it out.
#[tokio::test]
async fn a_busy_replica_stays_in_and_an_idle_silent_one_goes_out() {
    let (upstream, held) = silent_upstream().await;
    let metrics = Metrics::new().expect("metrics");
    let client = EngineClient::new(&[upstream], probing_settings(), &metrics);
    let replica = client.replicas()[0].clone();
    let busy = crate::client::replica::InFlight::new(replica.clone());
    for _ in 0..3 {
        probe_one(&client, &replica).await;
    }
    assert!(
        replica.is_healthy(),
        "three unanswered probes with a call in flight took the replica out"
    );
    drop(busy);
    for _ in 0..2 {
        probe_one(&client, &replica).await;
    }
    assert!(
        !replica.is_healthy(),
        "two unanswered probes with nothing in flight left the replica in"
    );
    held.abort();
}

/// A refused connection counts even while calls are in flight: busy is not dead.
#[tokio::test]
async fn a_refused_probe_counts_while_busy() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener); // nothing listens there now: connections are refused
    let upstream: http::Uri = format!("http://{addr}").parse().expect("uri");
    let metrics = Metrics::new().expect("metrics");
    let client = EngineClient::new(&[upstream], probing_settings(), &metrics);
    let replica = client.replicas()[0].clone();
    let _busy = crate::client::replica::InFlight::new(replica.clone());
    for _ in 0..2 {
        probe_one(&client, &replica).await;
    }
    assert!(
        !replica.is_healthy(),
        "two refused probes left a busy replica in rotation"
    );
}
