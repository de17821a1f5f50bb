//! The admin API on loopback: bearer token, policy validation, and switching the eviction
//! policy while requests flow.

mod support;

use std::time::Duration;

use support::{FakeUpstream, TestProxy, error_code, json};

async fn put(proxy: &TestProxy, token: Option<&str>, body: &str) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .put(proxy.url("/admin/eviction-policy"))
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.expect("send")
}

#[tokio::test]
async fn admin_needs_a_token_and_rejects_unknown_policies_with_the_valid_list() {
    let up = FakeUpstream::start(|_| async { json("{}") }).await;
    let off = TestProxy::start(&[up.url()], |_| {}).await;
    let resp = put(&off, Some("t"), r#"{"policy":"lfu"}"#).await;
    assert_eq!(resp.status(), 403);
    assert_eq!(error_code(resp).await, "admin_disabled");

    let proxy = TestProxy::start(&[up.url()], |a| a.admin_token = Some("s3cret".into())).await;
    let resp = put(&proxy, None, r#"{"policy":"lfu"}"#).await;
    assert_eq!(resp.status(), 401);
    let resp = put(&proxy, Some("wrong"), r#"{"policy":"lfu"}"#).await;
    assert_eq!(resp.status(), 401);

    let resp = put(&proxy, Some("s3cret"), r#"{"policy":"arc"}"#).await;
    assert_eq!(resp.status(), 400);
    let v: serde_json::Value = resp.json().await.expect("json");
    let msg = v["error"]["message"].as_str().expect("message");
    assert!(msg.contains("lru, lfu, sieve, fpb, hf, laru"), "{msg}");
    let resp = put(&proxy, Some("s3cret"), r#"{"policy":"opt"}"#).await;
    assert_eq!(resp.status(), 400, "opt needs the future: simulator only");

    let resp = put(
        &proxy,
        Some("s3cret"),
        r#"{"policy":"laru","lambda_min_misses":4}"#,
    )
    .await;
    assert_eq!(resp.status(), 200);
    let got: serde_json::Value = reqwest::Client::new()
        .get(proxy.url("/admin/eviction-policy"))
        .bearer_auth("s3cret")
        .send()
        .await
        .expect("get")
        .json()
        .await
        .expect("json");
    assert_eq!(got["policy"]["policy"], "laru");
    assert_eq!(got["policy"]["lambda_min_misses"], 4);
    assert_eq!(got["generation"], 1);
    let metrics = reqwest::get(proxy.url("/metrics"))
        .await
        .expect("m")
        .text()
        .await
        .expect("t");
    assert!(
        metrics.contains(r#"recache_eviction_policy_active{policy="laru"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn switching_policies_under_load_drops_no_request() {
    let up = FakeUpstream::start(|_| async {
        tokio::time::sleep(Duration::from_millis(2)).await;
        json(r#"{"ok":true}"#)
    })
    .await;
    let proxy = TestProxy::start(&[up.url()], |a| a.admin_token = Some("t".into())).await;
    proxy.wait_ready().await;
    let mut load = Vec::new();
    for _ in 0..8 {
        let url = proxy.url("/v1/completions");
        load.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut ok = 0;
            for _ in 0..50 {
                let r = client
                    .post(&url)
                    .body(r#"{"prompt":"x"}"#)
                    .send()
                    .await
                    .expect("send");
                assert_eq!(r.status(), 200);
                ok += 1;
            }
            ok
        }));
    }
    for i in 0..40 {
        let name = ["lru", "laru", "lfu", "sieve", "hf", "fpb"][i % 6];
        let resp = put(&proxy, Some("t"), &format!(r#"{{"policy":"{name}"}}"#)).await;
        assert_eq!(resp.status(), 200);
    }
    let mut total = 0;
    for t in load {
        total += t.await.expect("join");
    }
    assert_eq!(total, 400);
    assert_eq!(proxy.state.policy.load().generation, 40);
}
