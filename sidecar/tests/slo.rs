//! Deadline serving as recache forwards it, on loopback in front of an upstream that echoes
//! what it receives: which bodies carry `priority` under `--slo-engine-priority`, and the 400
//! for a deadline header that cannot be used. (Admission and refusals against a real engine:
//! tests/tests/engine_slo.rs.)

mod support;

use http::Response;
use support::{FakeUpstream, TestProxy, body, error_code};

/// Posts `sent` to `/v1/completions` with `headers`; the upstream's echo of the body it got.
async fn forwarded(proxy: &TestProxy, sent: &str, headers: &[(&str, &str)]) -> serde_json::Value {
    let mut req = reqwest::Client::new()
        .post(proxy.url("/v1/completions"))
        .header("content-type", "application/json")
        .body(sent.to_string());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.expect("send");
    assert_eq!(resp.status(), 200);
    let echo: serde_json::Value = resp.json().await.expect("json");
    serde_json::from_str(echo["body"].as_str().expect("body")).expect("forwarded json")
}

#[tokio::test]
async fn engine_priority_is_stamped_from_the_deadline_and_bad_deadlines_are_400() {
    let up = FakeUpstream::start(|req| async move {
        use http_body_util::BodyExt;
        let bytes = req.into_body().collect().await.expect("body").to_bytes();
        let echo = serde_json::json!({"body": String::from_utf8_lossy(&bytes)});
        Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(body(echo.to_string()))
            .expect("resp")
    })
    .await;
    let proxy = TestProxy::start(&[up.url()], |a| a.slo.slo_engine_priority = true).await;
    proxy.wait_ready().await;
    let sent = r#"{"model":"m","prompt":"hello","max_tokens":4}"#;

    // No deadline: the client's bytes, no priority.
    assert!(forwarded(&proxy, sent, &[]).await.get("priority").is_none());
    // A deadline: its priority; a later deadline, a higher value (vLLM runs low values first).
    let soon = forwarded(&proxy, sent, &[("x-recache-deadline-ms", "1000")]).await;
    let later = forwarded(&proxy, sent, &[("x-recache-deadline-ms", "60000")]).await;
    let (soon, later) = (soon["priority"].as_i64(), later["priority"].as_i64());
    assert!(soon.is_some() && soon < later, "{soon:?} {later:?}");
    // The client's own priority stands.
    let own = r#"{"model":"m","prompt":"hello","max_tokens":4,"priority":-5}"#;
    let kept = forwarded(&proxy, own, &[("x-recache-deadline-ms", "1000")]).await;
    assert_eq!(kept["priority"], -5);

    for (header, value) in [
        ("x-recache-deadline-ms", "soon"),
        ("x-recache-deadline-ms", "0"),
        ("x-recache-best-effort", "maybe"),
    ] {
        let mut req = reqwest::Client::new()
            .post(proxy.url("/v1/completions"))
            .header(header, value);
        if header != "x-recache-deadline-ms" {
            req = req.header("x-recache-deadline-ms", "1000");
        }
        let resp = req.body(sent).send().await.expect("send");
        assert_eq!(resp.status(), 400, "{header}: {value}");
        let code = error_code(resp).await;
        assert!(!code.is_empty(), "{header}: {value}");
    }
}
