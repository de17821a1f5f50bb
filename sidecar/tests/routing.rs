//! Replica choice on loopback: the routing rule chosen at start or through the admin API, and
//! `prefix` sending a returning prompt (token ids, text, chat) to the replica it went to before.

mod support;

use support::{FakeUpstream, TestProxy, json};

/// Two upstreams that say who they are.
async fn two() -> (FakeUpstream, FakeUpstream) {
    let a = FakeUpstream::start(|_| async { json(r#"{"replica":"a"}"#) }).await;
    let b = FakeUpstream::start(|_| async { json(r#"{"replica":"b"}"#) }).await;
    (a, b)
}

async fn who(proxy: &TestProxy, path: &str, body: serde_json::Value) -> String {
    let v: serde_json::Value = reqwest::Client::new()
        .post(proxy.url(path))
        .json(&body)
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    v["replica"].as_str().expect("replica").to_string()
}

fn tokens(user: u32, len: u32) -> Vec<u32> {
    (0..len).map(|t| user * 10_000 + t).collect()
}

#[tokio::test]
async fn prefix_routing_sends_returning_prompts_home() {
    let (a, b) = two().await;
    let proxy = TestProxy::start(&[a.url(), b.url()], |s| {
        s.routing = Some("prefix".into());
    })
    .await;
    let completions = |p: serde_json::Value| serde_json::json!({"model": "m", "prompt": p});
    let chat = |text: &str| serde_json::json!({"model": "m", "messages": [{"role": "user", "content": text}]});
    let long_text = |user: u32| format!("user {user} history: {}", "item title, ".repeat(60));
    let mut homes = Vec::new();
    for user in 0..6u32 {
        homes.push((
            who(
                &proxy,
                "/v1/completions",
                completions(tokens(user, 300).into()),
            )
            .await,
            who(
                &proxy,
                "/v1/completions",
                completions(long_text(user).into()),
            )
            .await,
            who(&proxy, "/v1/chat/completions", chat(&long_text(user + 50))).await,
        ));
    }
    let spread: std::collections::HashSet<_> = homes.iter().map(|h| h.0.clone()).collect();
    assert_eq!(
        spread.len(),
        2,
        "users spread over both replicas: {homes:?}"
    );
    for user in 0..6u32 {
        let mut longer = tokens(user, 300);
        longer.extend(1..50);
        let home = &homes[user as usize];
        assert_eq!(
            who(&proxy, "/v1/completions", completions(longer.into())).await,
            home.0
        );
        let text = format!("{} and more", long_text(user));
        assert_eq!(
            who(&proxy, "/v1/completions", completions(text.into())).await,
            home.1
        );
        assert_eq!(
            who(&proxy, "/v1/chat/completions", chat(&long_text(user + 50))).await,
            home.2
        );
    }
    let metrics = reqwest::get(proxy.url("/metrics"))
        .await
        .expect("m")
        .text()
        .await
        .expect("t");
    assert!(
        metrics.contains("recache_upstream_routed_total{"),
        "{metrics}"
    );
    assert!(
        metrics.contains("recache_route_decision_seconds_count"),
        "{metrics}"
    );
}

#[tokio::test]
async fn routing_switches_through_the_admin_api() {
    let (a, b) = two().await;
    let proxy = TestProxy::start(&[a.url(), b.url()], |s| {
        s.admin_token = Some("t".into());
    })
    .await;
    let admin = |body: &'static str| {
        reqwest::Client::new()
            .put(proxy.url("/admin/routing"))
            .bearer_auth("t")
            .body(body)
            .send()
    };
    let get: serde_json::Value = reqwest::Client::new()
        .get(proxy.url("/admin/routing"))
        .bearer_auth("t")
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(get["routing"]["routing"], "least-loaded");
    let bad = admin(r#"{"routing":"prefix","balance":-1}"#)
        .await
        .expect("put");
    assert_eq!(bad.status(), 400);
    let v: serde_json::Value = bad.json().await.expect("json");
    assert_eq!(v["error"]["param"], "routing");
    let bad = admin(r#"{"routing":"nearest"}"#).await.expect("put");
    assert_eq!(bad.status(), 400);
    let ok = admin(r#"{"routing":"prefix","balance":0.5}"#)
        .await
        .expect("put");
    assert_eq!(ok.status(), 200);
    let v: serde_json::Value = ok.json().await.expect("json");
    assert_eq!(v["routing"]["routing"], "prefix");
    assert_eq!(v["routing"]["balance"], 0.5);
    // Requests still flow, now by prefix.
    let body = serde_json::json!({"model": "m", "prompt": tokens(1, 128)});
    let first = who(&proxy, "/v1/completions", body.clone()).await;
    assert_eq!(who(&proxy, "/v1/completions", body).await, first);
}

#[tokio::test]
async fn a_bad_routing_spec_is_refused_at_start_naming_the_flag() {
    let args = recache::config::ServeArgs {
        upstream: vec!["http://127.0.0.1:1".into()],
        routing: Some("prefix:blocks=0".into()),
        ..Default::default()
    };
    let e = args.resolve().expect_err("refused").to_string();
    assert!(e.contains("--routing") && e.contains("blocks"), "{e}");
}
