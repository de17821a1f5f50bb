//! Unit tests of `itempool::costs`, and one against a stand-in engine's `/metrics` on loopback.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::client::{ClientSettings, EngineClient};

fn at(tokens: f64, seconds: f64) -> Sample {
    Sample { tokens, seconds }
}

/// vLLM's series as its `/metrics` shows them (two engines of one server, other sources).
fn vllm_text(tokens: f64, seconds: f64) -> String {
    format!(
        "# HELP vllm:prompt_tokens_by_source_total Prompt tokens by source.\n\
         # TYPE vllm:prompt_tokens_by_source_total counter\n\
         vllm:prompt_tokens_by_source_total{{engine=\"0\",model_name=\"m\",source=\"local_compute\"}} {}\n\
         vllm:prompt_tokens_by_source_total{{engine=\"1\",model_name=\"m\",source=\"local_compute\"}} {}\n\
         vllm:prompt_tokens_by_source_total{{engine=\"0\",model_name=\"m\",source=\"local_cache_hit\"}} 99999\n\
         vllm:prompt_tokens_by_source_created{{engine=\"0\",model_name=\"m\",source=\"local_compute\"}} 1.7e9\n\
         vllm:request_prefill_time_seconds_bucket{{engine=\"0\",le=\"0.3\",model_name=\"m\"}} 3\n\
         vllm:request_prefill_time_seconds_count{{engine=\"0\",model_name=\"m\"}} 3\n\
         vllm:request_prefill_time_seconds_sum{{engine=\"0\",model_name=\"m\"}} {seconds}\n",
        tokens / 2.0,
        tokens / 2.0,
    )
}

#[test]
fn reads_vllms_computed_tokens_and_prefill_seconds() {
    let read = |t: &str| recache_adapters::vllm::prefill_counters(t);
    assert_eq!(read(&vllm_text(1000.0, 2.5)), Some((1000.0, 2.5)));
    assert_eq!(read("sglang:prompt_tokens_total 5\n"), None);
}

#[test]
fn rates_are_counter_increments_over_time_increments() {
    assert_eq!(delta(at(10.0, 1.0), at(40.0, 1.5)), Some(at(30.0, 0.5)));
    assert_eq!(delta(at(10.0, 1.0), at(5.0, 2.0)), None, "a reset");
    assert_eq!(rate([at(700.0, 0.5), at(700.0, 0.5)]), Some(1400.0));
    assert_eq!(rate([at(700.0, 0.0)]), None, "no time counted");
    assert_eq!(rate([at(0.0, 1.0)]), None, "nothing computed");
    assert_eq!(rate([]), None);
}

#[test]
fn the_rate_in_use_follows_measurements_and_survives_resets_and_idle_periods() {
    let c = LiveCosts::new(Costs::default(), Given::default());
    assert_eq!(c.in_use().prefill, "default");
    assert!(
        !c.observe_prefill(&[Some(at(1000.0, 1.0)), None]),
        "a baseline"
    );
    assert_eq!(c.get(), Costs::default());
    // Replica 0 computed 6,000 tokens in 1 s, replica 1 is read for the first time.
    assert!(c.observe_prefill(&[Some(at(7000.0, 2.0)), Some(at(50.0, 0.1))]));
    assert_eq!(c.get().prefill_tokens_per_s, 6000.0);
    assert_eq!(c.in_use().prefill, "measured");
    // Replica 0 restarted (counters back near 0), replica 1 idle: the rate stands.
    assert!(!c.observe_prefill(&[Some(at(10.0, 0.01)), Some(at(50.0, 0.1))]));
    assert_eq!(c.get().prefill_tokens_per_s, 6000.0);
    // From the new baseline on, both count.
    assert!(c.observe_prefill(&[Some(at(4010.0, 1.01)), Some(at(2050.0, 0.6))]));
    assert_eq!(c.get().prefill_tokens_per_s, 6000.0 / 1.5);
    // Store reads: 1,900 tokens in 10 ms.
    assert!(!c.observe_fetch(at(0.0, 0.0)));
    assert!(c.observe_fetch(at(1900.0, 0.01)));
    assert!((c.get().fetch_tokens_per_s - 190_000.0).abs() < 1e-6);
    assert!(!c.observe_fetch(at(1900.0, 0.01)), "nothing fetched since");
    assert_eq!(c.detail()["fetch_source"], "measured");
}

#[test]
fn a_rate_the_flag_gives_is_never_measured_over() {
    let flag = Costs::parse("prefill=7000").expect("spec");
    let c = LiveCosts::new(flag, Given::of(Some("prefill=7000")));
    assert_eq!((c.in_use().prefill, c.in_use().fetch), ("flag", "default"));
    c.observe_prefill(&[Some(at(0.0, 0.0))]);
    assert!(!c.observe_prefill(&[Some(at(100.0, 1.0))]));
    assert_eq!(c.get().prefill_tokens_per_s, 7000.0);
    c.observe_fetch(at(0.0, 0.0));
    assert!(
        c.observe_fetch(at(500.0, 0.001)),
        "fetch is not given: measured"
    );
}

/// A stand-in engine on loopback whose `/metrics` answers `bodies` in turn (the last one
/// again once they run out).
async fn stand_in(bodies: Vec<String>) -> (http::Uri, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let bodies = Arc::new(Mutex::new(VecDeque::from(bodies)));
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let bodies = bodies.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.clear();
                    let body = {
                        let mut b = bodies.lock().expect("bodies");
                        match b.len() {
                            0 | 1 => b.front().cloned().unwrap_or_default(),
                            _ => b.pop_front().unwrap_or_default(),
                        }
                    };
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
                        body.len()
                    );
                    if conn.write_all(head.as_bytes()).await.is_err()
                        || conn.write_all(body.as_bytes()).await.is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}").parse().expect("uri"), task)
}

/// Through the engine client, as `recache serve` measures: the stand-in's counters give the
/// prefill rate, the connectors' reports the fetch rate, and the gauges say so.
#[tokio::test]
async fn measures_a_replicas_prefill_and_the_stores_fetch_on_loopback() {
    let (uri, server) = stand_in(vec![vllm_text(1000.0, 1.0), vllm_text(8000.0, 2.0)]).await;
    let settings = ClientSettings {
        connect_timeout: Duration::from_secs(1),
        upstream_timeout: Duration::from_secs(5),
        health_interval: Duration::from_secs(5),
        health_path: "/health",
        routing: Default::default(),
        engine: Default::default(),
        slo: Default::default(),
    };
    let registry = crate::metrics::Metrics::new().expect("metrics");
    let client = EngineClient::new(&[uri], settings, &registry);
    let engine = EngineHandle::new(client, recache_adapters::Engine::Vllm);
    let pools = crate::itempool::replicas::tests::test_pools(1, 4, Some("redis://127.0.0.1:1"));
    measure(&pools, &engine).await;
    let gauge = |g: &prometheus::GaugeVec, source: &str| g.with_label_values(&[source]).get();
    assert_eq!(gauge(&pools.metrics.cost_prefill, "default"), 876.0);
    pools.metrics.observe_report(
        0,
        &json!({"store_tokens_read": 1900, "total_store_fetch_s": 0.01}),
    );
    measure(&pools, &engine).await;
    let costs = pools.costs.in_use();
    assert_eq!(costs.costs.prefill_tokens_per_s, 7000.0, "{costs:?}");
    assert_eq!(costs.prefill, "measured");
    assert!(
        (costs.costs.fetch_tokens_per_s - 190_000.0).abs() < 1e-6,
        "{costs:?}"
    );
    assert_eq!(gauge(&pools.metrics.cost_prefill, "measured"), 7000.0);
    // One series per rate, the one in use: the default's was dropped (asking for it again
    // makes a new one at 0).
    assert_eq!(gauge(&pools.metrics.cost_prefill, "default"), 0.0);
    assert_eq!(pools.costs.get(), costs.costs, "what Alg. 1 reads");
    server.abort();
}
