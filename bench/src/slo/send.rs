//! Sending `/v1/rank` requests to a mode's child: one request with its deadline header and a
//! client timeout (classified as on-time/late success, deadline refusal, or error), the open
//! loop ([`crate::open_loop`]: every request fires at its scheduled time whatever the answers;
//! latency counts from that time), and the closed loop that measures the saturation rate.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::progress::Progress;
use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;

use crate::http::HttpClient;

/// The request header carrying the deadline in ms from arrival (recache's SLO interface).
pub const DEADLINE_HEADER: &str = "x-recache-deadline-ms";
/// The request header asking to be served late rather than refused.
pub const BEST_EFFORT_HEADER: &str = "x-recache-best-effort";

/// What a request asks of the proxy: its deadline, and whether it would rather be served late
/// than refused (`--best-effort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub deadline_ms: u64,
    pub best_effort: bool,
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// 2xx.
    Ok,
    /// 429 whose OpenAI-shaped error is `deadline_unreachable` (type or code).
    Rejected,
    /// Anything else: the kind (`timeout`, `connect`, `status_503`, ...).
    Error(String),
}

/// One request's end and its latency from its scheduled time.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub latency_ms: f64,
    pub answer: Answer,
}

/// Sends one prepared body; never longer than `timeout`.
pub async fn one(
    http: &HttpClient,
    url: &str,
    body: Bytes,
    ask: Option<Ask>,
    timeout: Duration,
) -> Answer {
    let mut req = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("content-type", "application/json");
    if let Some(ask) = ask {
        req = req.header(DEADLINE_HEADER, ask.deadline_ms.to_string());
        if ask.best_effort {
            req = req.header(BEST_EFFORT_HEADER, "1");
        }
    }
    let Ok(req) = req.body(Full::new(body)) else {
        return Answer::Error("build".into());
    };
    let answered = tokio::time::timeout(timeout, async {
        let resp = http.request(req).await.map_err(|_| "connect".to_string())?;
        let status = resp.status().as_u16();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .map_err(|_| "truncated".to_string())?;
        Ok::<_, String>((status, bytes.to_bytes()))
    })
    .await;
    match answered {
        Err(_) => Answer::Error("timeout".into()),
        Ok(Err(kind)) => Answer::Error(kind),
        Ok(Ok((s, _))) if (200..300).contains(&s) => Answer::Ok,
        Ok(Ok((429, b))) if is_deadline_refusal(&b) => Answer::Rejected,
        Ok(Ok((s, _))) => Answer::Error(format!("status_{s}")),
    }
}

/// Whether a 429 body is recache's `deadline_unreachable` refusal (not the per-client limit):
/// the name as the error's `type` or its `code` (OpenAI's `rate_limit_error` type with a code).
pub fn is_deadline_refusal(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body).is_ok_and(|v| {
        let e = &v["error"];
        e["type"] == "deadline_unreachable" || e["code"] == "deadline_unreachable"
    })
}

/// The open loop ([`crate::open_loop`], no cap on requests in flight): request `i` fires at
/// its arrival time `arrivals_s[i]` with body `bodies[i % len]`; latency counts from that time.
/// Each request ends by its own timeout, so waiting for all of them is bounded.
pub async fn open_loop(
    http: &HttpClient,
    url: &str,
    bodies: &[Bytes],
    arrivals_s: &[f64],
    ask: Ask,
    timeout: Duration,
    bar: &Progress,
) -> Vec<Sample> {
    let send = |i: usize| {
        let body = bodies[i % bodies.len().max(1)].clone();
        let (http, url) = (http.clone(), url.to_string());
        async move { one(&http, &url, body, Some(ask), timeout).await }
    };
    let done = crate::open_loop::run(arrivals_s, None, send, || bar.inc(1)).await;
    (done.answers.into_iter())
        .map(|a| match a {
            Ok(t) => Sample {
                latency_ms: t.latency_ms,
                answer: t.value,
            },
            Err(e) => Sample {
                latency_ms: f64::NAN,
                answer: Answer::Error(e),
            },
        })
        .collect()
}

/// The closed loop: `concurrency` workers send back to back for `length`; returns the
/// successes that finished within it, their latencies (ms), and the errors. Requests still in
/// flight at the end are awaited but not counted.
pub async fn closed_loop(
    http: &HttpClient,
    url: &str,
    bodies: &[Bytes],
    concurrency: usize,
    length: Duration,
    timeout: Duration,
) -> (usize, Vec<f64>, usize) {
    let start = Instant::now();
    let end = start + length;
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (http, url, next) = (http.clone(), url.to_string(), next.clone());
        let bodies: Vec<Bytes> = bodies.to_vec();
        tasks.spawn(async move {
            let (mut lat, mut errors) = (Vec::new(), 0);
            while Instant::now() < end {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let body = bodies[i % bodies.len().max(1)].clone();
                let sent = Instant::now();
                let answer = one(&http, &url, body, None, timeout).await;
                let done = Instant::now();
                match answer {
                    Answer::Ok if done <= end => lat.push((done - sent).as_secs_f64() * 1e3),
                    Answer::Ok => {}
                    _ => errors += 1,
                }
            }
            (lat, errors)
        });
    }
    let (mut lat, mut errors) = (Vec::new(), 0);
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((l, e)) => {
                lat.extend(l);
                errors += e;
            }
            Err(_) => errors += 1,
        }
    }
    (lat.len(), lat, errors)
}
