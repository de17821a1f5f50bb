//! recache's own port under hostile or greedy clients, on loopback: an oversized request head
//! gets 431, a head that never completes has its connection closed (slowloris), one client
//! address past `--max-in-flight-per-client` gets an OpenAI-shaped 429 while others and the
//! probes are still served, and with `--admin-listen` the admin API answers on its own port
//! only.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use recache::config::ServeArgs;
use recache::service::AppState;
use support::{FakeUpstream, TestProxy, error_code, json, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

#[tokio::test]
async fn an_oversized_head_gets_431_and_a_normal_one_still_passes() {
    let up = FakeUpstream::start(|_| async { json(r#"{"data":[]}"#) }).await;
    let proxy = TestProxy::start(&[up.url()], |a| {
        a.limits.max_header_bytes = Some(16 * 1024);
    })
    .await;
    proxy.wait_ready().await;
    let client = reqwest::Client::new();
    let resp = client
        .get(proxy.url("/v1/models"))
        .header("x-padding", "a".repeat(32 * 1024))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 431);
    let resp = client
        .get(proxy.url("/v1/models"))
        .header("x-padding", "a".repeat(4 * 1024))
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn a_head_that_never_completes_has_its_connection_closed() {
    let up = FakeUpstream::start(|_| async { json("{}") }).await;
    let proxy = TestProxy::start(&[up.url()], |a| {
        a.limits.header_read_timeout = Some(Duration::from_millis(300));
    })
    .await;
    let mut conn = TcpStream::connect(proxy.addr).await.expect("connect");
    conn.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .expect("write");
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    // The server either closes (read 0) or answers 408 then closes; it must not wait for us.
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(read.is_ok(), "connection still open after 5 s");
    // Not closed at once on the partial head: the 300 ms timer ran. Half of it leaves a 2x
    // margin for the time between recache's accept and `started`.
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "closed after {:?}, before the 300 ms head timeout",
        started.elapsed()
    );
}

#[tokio::test]
async fn the_head_timer_does_not_cut_a_slow_answer() {
    // The upstream takes longer than the head timeout to answer: a long generation.
    let up = FakeUpstream::start(|_| async {
        tokio::time::sleep(Duration::from_millis(700)).await;
        json(r#"{"data":[]}"#)
    })
    .await;
    let proxy = TestProxy::start(&[up.url()], |a| {
        a.limits.header_read_timeout = Some(Duration::from_millis(200));
    })
    .await;
    let client = reqwest::Client::new();
    let resp = client
        .post(proxy.url("/v1/models"))
        .body("{}")
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    // The same keep-alive connection serves a second request after the first answer.
    let again = client
        .get(proxy.url("/v1/models"))
        .send()
        .await
        .expect("send");
    assert_eq!(again.status(), 200);
}

#[tokio::test]
async fn one_client_past_its_in_flight_limit_gets_429_and_probes_still_pass() {
    // Answers wait for a permit, so requests stay in flight until the test releases them.
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let up = FakeUpstream::start(move |req| {
        let g = g.clone();
        async move {
            if req.uri().path() == "/v1/models" {
                if let Ok(p) = g.acquire().await {
                    p.forget();
                }
            }
            json(r#"{"data":[]}"#)
        }
    })
    .await;
    let proxy = TestProxy::start(&[up.url()], |a| {
        a.limits.max_in_flight_per_client = Some(2);
    })
    .await;
    proxy.wait_ready().await;
    let client = reqwest::Client::new();
    let slow: Vec<_> = (0..2)
        .map(|_| tokio::spawn(client.get(proxy.url("/v1/models")).send()))
        .collect();
    let limits = proxy.state.client_limits.clone().expect("limits on");
    let me: std::net::IpAddr = [127, 0, 0, 1].into();
    wait_for(
        "both held requests counted in flight for 127.0.0.1",
        Duration::from_secs(10),
        async || match limits.in_flight(me) {
            2 => Ok(()),
            n => Err(format!("{n} in flight")),
        },
    )
    .await;
    let third = client
        .get(proxy.url("/v1/models"))
        .send()
        .await
        .expect("send");
    assert_eq!(third.status(), 429);
    assert_eq!(error_code(third).await, "too_many_requests");
    let health = client
        .get(proxy.url("/health"))
        .send()
        .await
        .expect("health");
    assert_eq!(health.status(), 200, "probes are never refused");
    gate.add_permits(2);
    for s in slow {
        let resp = s.await.expect("join").expect("send");
        assert_eq!(resp.status(), 200);
    }
    gate.add_permits(1);
    let again = client
        .get(proxy.url("/v1/models"))
        .send()
        .await
        .expect("send");
    assert_eq!(
        again.status(),
        200,
        "places came back when the answers were sent"
    );
    assert_eq!(limits.in_flight(me), 0);
    let metrics = client
        .get(proxy.url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("recache_client_limit_refusals_total 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn with_admin_listen_the_admin_api_answers_on_its_own_port_only() {
    let up = FakeUpstream::start(|_| async { json(r#"{"data":[]}"#) }).await;
    let args = ServeArgs {
        upstream: vec![up.url()],
        admin_token: Some("s3cret".into()),
        admin_listen: Some("127.0.0.1:0".parse().expect("addr")),
        health_interval: Some(Duration::from_millis(100)),
        ..Default::default()
    };
    let config = args.resolve().expect("config");
    let main = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
    let (main_addr, admin_addr) = (
        main.local_addr().expect("addr"),
        admin.local_addr().expect("addr"),
    );
    let state = AppState::new(config).expect("state");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(recache::server::run_with_admin(
        main,
        Some(admin),
        state,
        async move {
            let _ = rx.await;
        },
    ));
    let client = reqwest::Client::new();
    let on_main = client
        .get(format!("http://{main_addr}/admin/eviction-policy"))
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("send");
    assert_eq!(on_main.status(), 403);
    assert_eq!(error_code(on_main).await, "forbidden");
    let on_admin = client
        .get(format!("http://{admin_addr}/admin/eviction-policy"))
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("send");
    assert_eq!(on_admin.status(), 200);
    let unauthorized = client
        .get(format!("http://{admin_addr}/admin/routing"))
        .send()
        .await
        .expect("send");
    assert_eq!(unauthorized.status(), 401);
    let proxied = client
        .get(format!("http://{admin_addr}/v1/models"))
        .send()
        .await
        .expect("send");
    assert_eq!(proxied.status(), 404, "the admin port forwards nothing");
    assert_eq!(error_code(proxied).await, "not_found");
    let _ = tx.send(());
    assert!(served.await.expect("join"), "drained");
}
