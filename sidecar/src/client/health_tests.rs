//! Unit tests of `client::health`.

use std::time::Duration;

use super::*;
use crate::client::ClientSettings;
use crate::client::replica::PROBE_FAILURES_TO_EJECT;
use crate::metrics::Metrics;

/// An engine that accepts connections and never answers: a probe of it lasts its whole
/// limit (here 5 s). Shutting the prober down must not wait for that.
#[tokio::test]
async fn shutdown_does_not_wait_for_a_probe_in_flight() {
    let (probed, mut probing) = tokio::sync::mpsc::unbounded_channel();
    let (upstream, accepted) = silent_upstream(Some(probed)).await;
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
/// `accepted` hears of each connection.
async fn silent_upstream(
    accepted: Option<tokio::sync::mpsc::UnboundedSender<()>>,
) -> (http::Uri, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
            if let Some(tx) = &accepted {
                let _ = tx.send(());
            }
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

/// A client over one replica at `upstream`, and the replica.
fn one_replica(upstream: http::Uri) -> (Arc<EngineClient>, Arc<Replica>) {
    let metrics = Metrics::new().expect("metrics");
    let client = EngineClient::new(&[upstream], probing_settings(), &metrics);
    let replica = client.replicas()[0].clone();
    (client, replica)
}

/// Probes `replica` `n` times and says whether it is in rotation after them.
async fn healthy_after(client: &EngineClient, replica: &Arc<Replica>, n: u32) -> bool {
    for _ in 0..n {
        probe_one(client, replica).await;
    }
    replica.is_healthy()
}

/// While a call is in flight, unanswered probes get [`BUSY_PROBE_GRACE`] more before they
/// count (a busy engine answers `/health` late); a hung engine still goes out after that.
#[tokio::test]
async fn a_busy_replica_gets_a_grace_and_a_hung_one_still_goes_out() {
    let (upstream, held) = silent_upstream(None).await;
    let (client, replica) = one_replica(upstream);
    let _busy = crate::client::replica::InFlight::new(replica.clone());
    let grace = PROBE_FAILURES_TO_EJECT + BUSY_PROBE_GRACE;
    assert!(
        healthy_after(&client, &replica, grace - 1).await,
        "{} unanswered probes with a call in flight took the replica out",
        grace - 1
    );
    assert!(
        !healthy_after(&client, &replica, 1).await,
        "{grace} unanswered probes in a row left a busy replica in"
    );
    held.abort();
}

/// With nothing in flight, two unanswered probes take a replica out.
#[tokio::test]
async fn an_idle_silent_replica_goes_out_after_two_probes() {
    let (upstream, held) = silent_upstream(None).await;
    let (client, replica) = one_replica(upstream);
    assert!(
        healthy_after(&client, &replica, 1).await,
        "one late probe took it out"
    );
    assert!(!healthy_after(&client, &replica, 1).await, "two left it in");
    held.abort();
}

/// A refused connection gets no grace while calls are in flight: busy is not dead.
#[tokio::test]
async fn a_refused_probe_counts_while_busy() {
    let (upstream, held) = silent_upstream(None).await;
    held.abort(); // the listener goes with its task: connections there are refused
    let _ = held.await;
    let (client, replica) = one_replica(upstream);
    let _busy = crate::client::replica::InFlight::new(replica.clone());
    assert!(
        !healthy_after(&client, &replica, PROBE_FAILURES_TO_EJECT).await,
        "two refused probes left a busy replica in rotation"
    );
}
