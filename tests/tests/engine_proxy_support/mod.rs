//! The real-engine proxy suite's request helpers: posts and their checks, SSE events, and
//! long streams read until they end or are cut (for the mid-stream kills).

use std::time::Duration;

use recache_integration::Proxy;
use serde_json::Value;

/// POSTs `body`; the status and the body, parsed when it is JSON, as a string otherwise (SGLang's
/// `/flush_cache` answers text, and an error body shows in the status assertion).
pub async fn post(url: String, body: Value) -> (u16, Value) {
    let resp = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("send");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A 200 with a JSON body (the checks that look at the status only).
/// Reads a stream into `raw` for up to `within`: true when the connection was cut (a read
/// error), false when it ended cleanly or is still open at the deadline.
pub async fn read_to_end_or_cut(
    resp: &mut reqwest::Response,
    raw: &mut Vec<u8>,
    within: Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => raw.extend_from_slice(&c),
            Ok(Ok(None)) | Err(_) => return false,
            Ok(Err(_)) => return true,
        }
    }
}

/// Opens two long streams through `proxy` (fewest-outstanding puts one on each replica) and
/// waits for each one's first chunk. Two engines decoding on CI's two cores can be slow to
/// the first token: allow minutes, and say what the engines were doing if that is not enough.
pub async fn open_two_streams(
    proxy: &Proxy,
    long: &Value,
    engines: [&recache_integration::Testbed; 2],
) -> (Vec<reqwest::Response>, Vec<Vec<u8>>) {
    let mut streams = Vec::new();
    for _ in 0..2 {
        let resp = reqwest::Client::new()
            .post(proxy.url("/v1/completions"))
            .json(long)
            .send()
            .await
            .expect("send");
        streams.push(resp);
    }
    let mut firsts = Vec::new();
    for (i, resp) in streams.iter_mut().enumerate() {
        let first = tokio::time::timeout(Duration::from_secs(180), resp.chunk()).await;
        let Ok(first) = first else {
            let mut why = String::new();
            for (name, tb) in ["a", "b"].into_iter().zip(engines) {
                let running = tb.metric("vllm:num_requests_running").await;
                let waiting = tb.metric("vllm:num_requests_waiting").await;
                why += &format!(
                    "\n--- replica {name}: running {running}, waiting {waiting}; log tail:\n{}",
                    tb.log_tail(25)
                );
            }
            let spread: Vec<usize> = proxy
                .state
                .client
                .replicas()
                .iter()
                .map(|u| u.in_flight())
                .collect();
            panic!(
                "stream {i}: no first chunk within 180 s; recache in flight per replica {spread:?}{why}"
            );
        };
        firsts.push(first.expect("chunk").expect("some data").to_vec());
    }
    let shown: Vec<String> = firsts
        .iter()
        .map(|f| String::from_utf8_lossy(f).chars().take(200).collect())
        .collect();
    eprintln!("first chunks: {shown:?}");
    (streams, firsts)
}

/// Sends `body` to `url` `n` times at once; every answer must be a 200 with JSON.
pub async fn all_200(url: String, body: &Value, n: usize) {
    let tasks: Vec<_> = (0..n)
        .map(|_| tokio::spawn(post(url.clone(), body.clone())))
        .collect();
    for t in tasks {
        assert_json_200(t.await.expect("join"));
    }
}

pub fn assert_json_200((status, v): (u16, Value)) {
    assert_eq!(status, 200, "{v}");
    assert!(!v.is_string(), "not JSON: {v}");
}

/// The `data:` events of an SSE stream, parsed (`[DONE]` dropped).
pub async fn sse_events(url: String, body: Value) -> Vec<Value> {
    let mut resp = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status(), 200);
    let mut raw = Vec::new();
    while let Some(chunk) = resp.chunk().await.expect("chunk") {
        raw.extend_from_slice(&chunk);
    }
    String::from_utf8_lossy(&raw)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).expect("event json"))
        .collect()
}
