//! Per-replica routing mirrors on loopback: each stand-in engine keeps a prefix cache of
//! 32-token blocks, answers with the cached tokens it reused, and publishes its stores as KV
//! events on its own ZMQ socket (the real-engine version is in tests/tests/engine_proxy.rs). Checked:
//! the canary verifies each mirror (`exact`), `prefix` routes by what the events say, an
//! engine that delivers no hits while its events say it could is flagged (silent 0%), and a
//! dead event stream turns a mirror `approximate` while requests still succeed, two recache
//! instances over the same engines route a prompt to the same engine, and the canaries are
//! counted as recache's own traffic exactly as the engines saw them.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use recache_hash::blocks::prompt_ids;
use rmpv::Value;
use support::{FakeUpstream, TestProxy, body, wait_for};
use tokio::sync::mpsc;
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

const BS: usize = 32;

/// A stand-in engine: its name, its cache, and the channel to its event publisher.
struct Engine {
    http: FakeUpstream,
    events: String,
    publisher: tokio::task::JoinHandle<()>,
    /// Completions it answered: [requests, prompt tokens, cached tokens reported].
    seen: Arc<Mutex<[u64; 3]>>,
}

async fn engine(name: &'static str, report_hits: bool) -> Engine {
    let mut sock = PubSocket::new();
    let events = sock
        .bind("tcp://127.0.0.1:0")
        .await
        .expect("bind events")
        .to_string();
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u32>>();
    let publisher = tokio::spawn(async move {
        let mut seq = 0u64;
        while let Some(tokens) = rx.recv().await {
            // One BlockStored per prompt: content ids double as the engine's block hashes.
            let ids = prompt_ids(&tokens, BS);
            let ev = Value::Map(vec![
                ("type".into(), "BlockStored".into()),
                (
                    "block_hashes".into(),
                    Value::Array(ids.iter().map(|&h| h.into()).collect()),
                ),
                ("parent_block_hash".into(), Value::Nil),
                (
                    "token_ids".into(),
                    Value::Array(tokens[..ids.len() * BS].iter().map(|&t| t.into()).collect()),
                ),
                ("block_size".into(), (BS as u64).into()),
            ]);
            let mut payload = Vec::new();
            rmpv::encode::write_value(
                &mut payload,
                &Value::Array(vec![0.0f64.into(), Value::Array(vec![ev])]),
            )
            .expect("encode");
            let mut m = ZmqMessage::from(Bytes::from_static(b"kv"));
            m.push_back(Bytes::copy_from_slice(&seq.to_be_bytes()));
            m.push_back(payload.into());
            seq += 1;
            if sock.send(m).await.is_err() {
                return;
            }
        }
    });
    let cache = Arc::new(Mutex::new(HashSet::<u64>::new()));
    let seen = Arc::new(Mutex::new([0u64; 3]));
    let counts = seen.clone();
    let http = FakeUpstream::start(move |req| {
        let (cache, tx, counts) = (cache.clone(), tx.clone(), counts.clone());
        async move {
            if req.uri().path() == "/health" {
                return support::json("{}");
            }
            let bytes = req.into_body().collect().await.expect("body").to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
            let tokens: Vec<u32> = v["prompt"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|t| t.as_u64())
                        .map(|t| t as u32)
                        .collect()
                })
                .unwrap_or_default();
            let ids = prompt_ids(&tokens, BS);
            let cached = {
                let mut c = cache.lock().expect("cache");
                let hit = ids.iter().take_while(|i| c.contains(i)).count();
                c.extend(ids.iter().copied());
                hit * BS
            };
            let _ = tx.send(tokens.clone());
            let reported = if report_hits { cached } else { 0 };
            {
                let mut n = counts.lock().expect("counts");
                n[0] += 1;
                n[1] += tokens.len() as u64;
                n[2] += reported as u64;
            }
            let answer = serde_json::json!({
                "replica": name,
                "usage": {"prompt_tokens": tokens.len(),
                          "prompt_tokens_details": {"cached_tokens": reported}},
            });
            http::Response::builder()
                .header("content-type", "application/json")
                .body(body(answer.to_string()))
                .expect("response")
        }
    })
    .await;
    Engine {
        http,
        events,
        publisher,
        seen,
    }
}

async fn ready(proxy: &TestProxy) -> serde_json::Value {
    reqwest::get(proxy.url("/ready"))
        .await
        .expect("ready")
        .json()
        .await
        .expect("json")
}

/// Polls `/ready` until every upstream's mirror state is in `want` (in order), or panics.
async fn wait_states(proxy: &TestProxy, want: &[&str]) -> serde_json::Value {
    wait_for(
        format_args!("mirror states {want:?}"),
        Duration::from_secs(15),
        async || {
            let r = reqwest::get(proxy.url("/ready"))
                .await
                .map_err(|e| e.to_string())?;
            if r.status() != 200 {
                return Err(format!("/ready {}", r.status()));
            }
            let v: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
            let got: Vec<&str> = v["upstreams"]
                .as_array()
                .map(|a| a.iter().filter_map(|u| u["mirror"].as_str()).collect())
                .unwrap_or_default();
            if got == want {
                Ok(v.clone())
            } else {
                Err(format!("/ready {v}"))
            }
        },
    )
    .await
}

/// Waits until `proxy`'s mirror of replica `replica` holds every full block of `tokens`: the
/// engine's KV events for that prompt have reached this recache.
async fn wait_mirrored(proxy: &TestProxy, replica: usize, tokens: &[u32]) {
    let keys = prompt_ids(tokens, BS);
    let mirror = &proxy.state.client.replicas()[replica].mirror;
    wait_for(
        format_args!(
            "replica {replica}'s mirror holding the {} blocks of a prompt sent to it",
            keys.len()
        ),
        Duration::from_secs(10),
        async || match mirror.held_prefix(&keys) {
            n if n == keys.len() => Ok(()),
            n => Err(format!("{n} blocks held")),
        },
    )
    .await
}

async fn post(url: &str, tokens: &[u32]) -> serde_json::Value {
    reqwest::Client::new()
        .post(url)
        .json(&serde_json::json!({"model": "m", "prompt": tokens, "max_tokens": 1}))
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json")
}

async fn metrics(proxy: &TestProxy) -> String {
    reqwest::get(proxy.url("/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// The value of `name`'s series whose labels include every one of `labels` (0 if none).
fn series(metrics: &str, name: &str, labels: &[&str]) -> u64 {
    (metrics.lines())
        .filter(|l| l.starts_with(&format!("{name}{{")) && labels.iter().all(|p| l.contains(p)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

fn prompt(user: u32) -> Vec<u32> {
    (0..600).map(|t| 5000 + user * 1000 + t).collect()
}

#[tokio::test]
async fn canaries_verify_mirrors_and_prefix_routes_by_events() {
    let (a, b) = (engine("a", true).await, engine("b", true).await);
    let proxy = TestProxy::start(&[a.http.url(), b.http.url()], |s| {
        s.routing = Some("prefix".into());
        s.kvloop.kv_events = vec![a.events.clone(), b.events.clone()];
        s.route_canary = Some(Duration::from_millis(300));
    })
    .await;
    proxy.wait_ready().await;
    let r = wait_states(&proxy, &["exact", "exact"]).await;
    assert!(
        r["upstreams"][0]["mirror_why"]
            .as_str()
            .is_some_and(|w| w.contains("canary")),
        "{r}"
    );
    // Prompts computed on one engine behind recache's back: only its events say so. (Not
    // alternating: blind tie-breaking would alternate too.)
    let homes = ["b", "b", "a", "b"];
    for (user, home) in homes.iter().enumerate() {
        let home = if *home == "a" { &a } else { &b };
        post(
            &format!("{}/v1/completions", home.http.url()),
            &prompt(user as u32),
        )
        .await;
    }
    for (user, home) in homes.iter().enumerate() {
        wait_mirrored(&proxy, usize::from(*home == "b"), &prompt(user as u32)).await;
    }
    for (user, want) in homes.iter().enumerate() {
        let user = user as u32;
        let got = post(&proxy.url("/v1/completions"), &prompt(user)).await;
        assert_eq!(got["replica"], *want, "user {user}: {got}");
        assert_eq!(
            got["usage"]["prompt_tokens_details"]["cached_tokens"], 576,
            "the engine reused the prefix"
        );
    }
    let metrics = metrics(&proxy).await;
    for want in [
        "recache_route_canary_total{outcome=\"agree\"",
        "recache_route_mirror_state{state=\"exact\"",
        "recache_route_delivered_cached_tokens_total",
        "recache_route_mirror_blocks",
    ] {
        assert!(metrics.contains(want), "{want} missing:\n{metrics}");
    }
}

/// Nothing but canaries reaches the engines here, so recache's own-traffic counters must say
/// exactly what each engine answered: a benchmark subtracts them from the engines' counters.
#[tokio::test]
async fn canaries_are_counted_as_recaches_own_traffic() {
    let (a, b) = (engine("a", true).await, engine("b", true).await);
    let proxy = TestProxy::start(&[a.http.url(), b.http.url()], |s| {
        s.routing = Some("prefix".into());
        s.kvloop.kv_events = vec![a.events.clone(), b.events.clone()];
        s.route_canary = Some(Duration::from_millis(300));
    })
    .await;
    proxy.wait_ready().await;
    for e in [&a, &b] {
        let up = format!("upstream=\"{}\"", e.http.addr);
        wait_for(
            format_args!("{up}: three canaries counted as own traffic, as the engine saw them"),
            Duration::from_secs(20),
            async || {
                let m = metrics(&proxy).await;
                let own = |name: &str, kind: Option<&str>| {
                    let kind = kind.map(|k| format!("kind=\"{k}\""));
                    let mut labels = vec![up.as_str(), "what=\"canary\""];
                    labels.extend(kind.as_deref());
                    series(&m, name, &labels)
                };
                let counted = [
                    own("recache_own_requests_total", None),
                    own("recache_own_tokens_total", Some("prompt")),
                    own("recache_own_tokens_total", Some("cached")),
                ];
                let in_flight = series(&m, "recache_own_in_flight", &[&up]);
                let seen = *e.seen.lock().expect("counts");
                if counted == seen && seen[0] >= 3 && seen[2] > 0 && in_flight == 0 {
                    Ok(())
                } else {
                    Err(format!(
                        "counted {counted:?} ({in_flight} in flight), engine saw {seen:?}"
                    ))
                }
            },
        )
        .await;
    }
}

#[tokio::test]
async fn silent_zero_is_flagged_and_a_dead_event_stream_falls_back() {
    let (a, z) = (engine("a", true).await, engine("z", false).await);
    let proxy = TestProxy::start(&[a.http.url(), z.http.url()], |s| {
        s.routing = Some("prefix".into());
        s.kvloop.kv_events = vec![a.events.clone(), z.events.clone()];
        s.route_canary = Some(Duration::from_millis(300));
    })
    .await;
    proxy.wait_ready().await;
    // z's events say its canary prefix is cached; z reports no cached tokens.
    let r = wait_states(&proxy, &["exact", "degraded"]).await;
    assert_eq!(r["upstreams"][1]["silent_zero"], true, "{r}");
    let metrics = metrics(&proxy).await;
    let silent = format!(
        "recache_route_silent_zero{{upstream=\"{}\"}} 1",
        z.http.addr
    );
    assert!(metrics.contains(&silent), "{silent} missing:\n{metrics}");
    // a's publisher goes away: its mirror turns approximate; requests still succeed.
    a.publisher.abort();
    let _ = a.publisher.await;
    wait_states(&proxy, &["approximate", "degraded"]).await;
    for user in 0..4u32 {
        let got = post(&proxy.url("/v1/completions"), &prompt(user)).await;
        assert!(got["replica"].is_string(), "{got}");
    }
    assert_eq!(ready(&proxy).await["status"], "ready");
}

/// Two recache instances in front of the same two engines, talking to no one but the
/// engines: a prompt first sent through one instance is routed by the other to the engine
/// that computed it (both read the same KV events), under `gr` as under `prefix`.
#[tokio::test]
async fn two_instances_route_consistently_from_the_same_events() {
    let (a, b) = (engine("a", true).await, engine("b", true).await);
    let urls = [a.http.url(), b.http.url()];
    let events = vec![a.events.clone(), b.events.clone()];
    let mut instances = Vec::new();
    for _ in 0..2 {
        let events = events.clone();
        let p = TestProxy::start(&urls, move |s| {
            s.routing = Some("gr".into());
            s.kvloop.kv_events = events;
            s.route_canary = Some(Duration::from_millis(300));
        })
        .await;
        instances.push(p);
    }
    let (one, two) = (&instances[0], &instances[1]);
    for p in [one, two] {
        p.wait_ready().await;
        wait_states(p, &["exact", "exact"]).await;
    }
    for user in 0..6u32 {
        let (first, second) = if user % 2 == 0 {
            (one, two)
        } else {
            (two, one)
        };
        let went = post(&first.url("/v1/completions"), &prompt(100 + user)).await;
        let home = usize::from(went["replica"] == "b");
        wait_mirrored(second, home, &prompt(100 + user)).await;
        let again = post(&second.url("/v1/completions"), &prompt(100 + user)).await;
        assert_eq!(
            again["replica"], went["replica"],
            "user {user}: {went} then {again}"
        );
        assert_eq!(
            again["usage"]["prompt_tokens_details"]["cached_tokens"], 576,
            "user {user}: the other instance's prompt was reused"
        );
    }
}
