//! A connect that times out is not a refused one: a host starved under a burst (its accept
//! queue full for a moment) is dialed once more when no other replica can take the call, and
//! stays in rotation when that works; a replica whose connects keep timing out is answered
//! with a 503 within the retry budget and taken out.
//!
//! The stuck host is a listener with a backlog of 0 whose accept queue is filled and not
//! drained: Linux drops further SYNs (counting each in `TcpExt: ListenOverflows`), so a
//! connect to it times out.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::{TestProxy, error_code, post_completion, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpSocket;
use tokio::sync::watch;

/// The default: a test with a shorter timeout once hid that the retry budget (twice the
/// default) cut the second dial.
const CONNECT_TIMEOUT: Duration = recache::config::DEFAULT_CONNECT_TIMEOUT;

/// The tests of this file run one at a time: `ListenOverflows` counts for the whole host, and
/// a stuck host of one test would otherwise open the other's gate.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An upstream that answers every request `{}` and closes (so the proxy keeps no idle
/// connection and dials for each call), accepting only while `accepting` holds true.
async fn gated_upstream(accepting: watch::Receiver<bool>) -> SocketAddr {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let listener = socket.listen(0).expect("listen");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut accepting = accepting;
        loop {
            if accepting.wait_for(|open| *open).await.is_err() {
                return;
            }
            let (mut s, _) = tokio::select! {
                conn = listener.accept() => match conn { Ok(c) => c, Err(_) => return },
                _ = accepting.changed() => continue,
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                if s.read(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
                let ok = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                          content-length: 2\r\nconnection: close\r\n\r\n{}";
                let _ = s.write_all(ok.as_bytes()).await;
            });
        }
    });
    addr
}

/// A proxy in front of a gated upstream, ready (its one probe answered), the upstream then
/// stuck: no longer accepting, its queue full (the streams returned keep it so).
async fn stuck() -> (TestProxy, watch::Sender<bool>, Vec<std::net::TcpStream>) {
    let (gate, accepting) = watch::channel(true);
    let addr = gated_upstream(accepting).await;
    let proxy = TestProxy::start(&[format!("http://{addr}")], proxy_args).await;
    proxy.wait_ready().await;
    gate.send_replace(false);
    let held = tokio::task::spawn_blocking(move || fill_queue(addr))
        .await
        .expect("fill");
    (proxy, gate, held)
}

/// Fills `addr`'s accept queue: connects until one times out. The streams returned keep it full.
fn fill_queue(addr: SocketAddr) -> Vec<std::net::TcpStream> {
    let mut held = Vec::new();
    for _ in 0..16 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(s) => held.push(s),
            Err(_) => return held,
        }
    }
    panic!("16 connects to a listener with backlog 0 all succeeded: cannot make a stuck host");
}

/// The kernel's count of SYNs dropped at a full accept queue (`TcpExt: ListenOverflows`).
fn listen_overflows() -> u64 {
    let text = std::fs::read_to_string("/proc/net/netstat").expect("/proc/net/netstat");
    let mut lines = text.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "ListenOverflows")
        .and_then(|(_, v)| v.parse().ok())
        .expect("TcpExt ListenOverflows in /proc/net/netstat")
}

fn series(proxy: &TestProxy, name: &str) -> f64 {
    String::from_utf8_lossy(&proxy.state.metrics.render())
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn proxy_args(args: &mut recache::config::ServeArgs) {
    args.connect_timeout = Some(CONNECT_TIMEOUT);
    // No probe after the first one (at start, before the host is stuck): the calls decide.
    args.health_interval = Some(Duration::from_secs(3600));
}

#[tokio::test]
async fn a_timed_out_connect_to_the_only_replica_is_dialed_once_more() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (proxy, gate, held) = stuck().await;
    // The host recovers once the first connect's SYN has been dropped (counted by the kernel
    // as a listen overflow; its retransmit comes after a second, past the timeout), in time
    // for the second connect.
    let dropped = listen_overflows();
    let recovers = async {
        wait_until(
            "the kernel dropping the first connect's SYN (TcpExt ListenOverflows rising)",
            CONNECT_TIMEOUT,
            async || listen_overflows() > dropped,
        )
        .await;
        gate.send_replace(true);
    };
    let client = reqwest::Client::new();
    let (resp, ()) = tokio::join!(post_completion(&client, &proxy), recovers);
    assert_eq!(resp.status(), 200, "{:?}", resp.text().await);
    assert_eq!(
        series(&proxy, "recache_upstream_errors_total{"),
        1.0,
        "one timed-out connect counted"
    );
    assert_eq!(
        series(&proxy, "recache_upstream_healthy{"),
        1.0,
        "still in rotation"
    );
    drop(held);
}

#[tokio::test]
async fn a_replica_whose_connects_keep_timing_out_gets_a_503_within_the_budget() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let (proxy, _gate, held) = stuck().await;
    let started = Instant::now();
    let resp = post_completion(&reqwest::Client::new(), &proxy).await;
    let took = started.elapsed();
    assert_eq!(resp.status(), 503);
    assert_eq!(error_code(resp).await, "upstream_connect_error");
    assert!(
        took < 2 * CONNECT_TIMEOUT + Duration::from_millis(500),
        "503 after {took:?}: two connects of {CONNECT_TIMEOUT:?} and no more"
    );
    assert_eq!(series(&proxy, "recache_upstream_errors_total{"), 2.0);
    assert_eq!(
        series(&proxy, "recache_upstream_healthy{"),
        0.0,
        "taken out"
    );
    drop(held);
}
