//! The cache-aware routing rules on two real replicas of each engine (vLLM and SGLang, one
//! body): under `prefix` and `gr`, a returning user's ranking request goes to the replica
//! that holds its profile (the engine reports the profile cached, every time; fewest
//! outstanding would find it about half the time), new users spread over both replicas under
//! `prefix`, and two recache instances in front of the same replicas, sharing nothing, send a
//! user's requests to the same replica under `gr`. No KV events: the rules run on recache's
//! record of what it sent where (SGLang's token-granular events leave its mirrors
//! `approximate` anyway), so this is the mode every deployment has.

use recache_integration::{Engine, Proxy};
use serde_json::{Value, json};

/// Profile tokens per user: 16 blocks of 32.
const PROFILE: u32 = 512;

async fn post(url: String, body: &Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("json body"))
}

/// A user-first ranking request of user `u` over 12 candidates drawn with `salt`.
fn request(model: &str, u: u32, salt: u32) -> Value {
    let profile: Vec<u32> = (0..PROFILE)
        .map(|t| 10 + (u * 997 + t * 7) % 3000)
        .collect();
    let items: Vec<Value> = (0..12)
        .map(|i| {
            let id = salt * 100 + i;
            json!({"id": id, "tokens": [4000 + id % 500, 4600 + id % 300, 5000 + i]})
        })
        .collect();
    json!({"model": model, "user": {"id": format!("user-{u}"), "tokens": profile},
        "items": items, "instruction": [11, 12, 13], "mode": "user_prefix"})
}

/// Requests routed to each replica so far.
fn routed(proxy: &Proxy) -> Vec<u64> {
    let text = String::from_utf8_lossy(&proxy.state.metrics.render()).into_owned();
    (proxy.state.client.replicas().iter())
        .map(|r| {
            let key = format!("recache_upstream_routed_total{{upstream=\"{}\"}} ", r.label);
            (text.lines())
                .find_map(|l| l.strip_prefix(key.as_str())?.trim().parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

async fn returning_users_go_where_their_profile_is(engine: Engine) {
    // Both replicas start side by side (CI time).
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| engine.testbed("route-a", &[]));
        let b = engine.testbed("route-b", &[]);
        (a.join().expect("testbed route-a"), b)
    });
    // `gr` with balance 1: five users' homes split unevenly more often than not, and the
    // default load bound (1.3x the mean share) would move some of them off home, as it is
    // meant to; this test is about homes and prefixes, not the bound.
    for (n, rule) in ["prefix", "gr:balance=1"].into_iter().enumerate() {
        let mut args = engine.serve_args(&[&a.upstream, &b.upstream]);
        args.routing = Some(rule.into());
        let proxy = Proxy::start_with(&args).await;
        let url = proxy.url("/v1/rank");
        // Users of this rule only (the other rule's users are cached somewhere already).
        let users: Vec<u32> = (0..5).map(|u| 100 * (n as u32 + 1) + u).collect();
        for &u in &users {
            let (status, v) = post(url.clone(), &request(&a.model, u, 0)).await;
            assert_eq!(status, 200, "{rule}: {v}");
        }
        // New users spread by load under `prefix` (under `gr` they go to their homes, which
        // five users may all share).
        let spread = routed(&proxy);
        assert!(
            rule != "prefix" || spread.iter().all(|&n| n >= 1),
            "{rule}: new users spread over both replicas: {spread:?}"
        );
        // Each user returns once, with other candidates.
        for &u in &users {
            let (status, v) = post(url.clone(), &request(&a.model, u, 1)).await;
            assert_eq!(status, 200, "{rule}: {v}");
            let cached = v["usage"]["cached_tokens"].as_u64().unwrap_or(0);
            assert!(
                cached >= PROFILE as u64,
                "{rule}, user {u}: the profile was not where the request went \
                 (cached {cached} of {} prompt tokens; routed so far {:?})",
                v["usage"]["prompt_tokens"],
                routed(&proxy)
            );
        }
    }
    // Two recache instances in front of the same replicas, sharing nothing: under `gr` a
    // user's next request, through the other instance, still finds its profile (both
    // compute the same home), where `prefix` would find it about half the time.
    let mut args = engine.serve_args(&[&a.upstream, &b.upstream]);
    args.routing = Some("gr:balance=1".into());
    let one = Proxy::start_with(&args).await;
    // The other instance lists the replicas the other way round: homes do not depend on it.
    let mut other = engine.serve_args(&[&b.upstream, &a.upstream]);
    other.routing = Some("gr:balance=1".into());
    let two = Proxy::start_with(&other).await;
    for u in 300..305 {
        for (turn, proxy) in [&one, &two, &one].into_iter().enumerate() {
            let (status, v) = post(proxy.url("/v1/rank"), &request(&a.model, u, turn as u32)).await;
            assert_eq!(status, 200, "two instances: {v}");
            let cached = v["usage"]["cached_tokens"].as_u64().unwrap_or(0);
            assert!(
                turn == 0 || cached >= PROFILE as u64,
                "two instances, user {u}, turn {turn}: cached {cached} (routed {:?} / {:?})",
                routed(&one),
                routed(&two)
            );
        }
    }
    a.down();
    b.down();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn vllm_returning_users_go_where_their_profile_is() {
    returning_users_go_where_their_profile_is(Engine::Vllm).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real engine (tests/run runs it with --include-ignored)"]
async fn sglang_returning_users_go_where_their_profile_is() {
    returning_users_go_where_their_profile_is(Engine::Sglang).await;
}
