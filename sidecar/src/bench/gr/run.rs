//! Sends one mode's request stream through recache's `/v1/rank`: each request is released at
//! its sampled arrival time and waits for one of `concurrency` slots; latency is measured from
//! the moment it is sent.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::http;
use crate::bench::BenchError;
use crate::bench::HttpClient;
use crate::progress::Progress;

/// What recache answered over one mode's run.
#[derive(Debug, Default)]
pub struct Outcome {
    pub latencies_ms: Vec<f64>,
    pub errors: usize,
    pub first_error: Option<String>,
    pub wall_s: f64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub user_prefix: usize,
    /// Each request's answer by its index in the stream (`None`: an error), for callers that
    /// read the rankings (`bench quality`).
    pub answers: Vec<Option<Value>>,
}

pub struct Stream<'a> {
    pub bodies: &'a [Arc<Value>],
    pub arrivals_s: &'a [f64],
    pub concurrency: usize,
}

pub async fn run(
    client: &HttpClient,
    rank_url: &str,
    stream: &Stream<'_>,
    request_mode: &str,
    salt: &dyn Fn(usize) -> String,
    bar: &Progress,
) -> Result<Outcome, BenchError> {
    let slots = Arc::new(Semaphore::new(stream.concurrency.max(1)));
    let start = tokio::time::Instant::now();
    let began = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (i, body) in stream.bodies.iter().enumerate() {
        let mut body = (**body).clone();
        body["mode"] = json!(request_mode);
        body["cache_salt"] = json!(salt(i));
        let (client, url, slots) = (client.clone(), rank_url.to_string(), slots.clone());
        let at = start + Duration::from_secs_f64(stream.arrivals_s[i]);
        tasks.spawn(async move {
            tokio::time::sleep_until(at).await;
            let _slot = slots.acquire_owned().await;
            let sent = Instant::now();
            let answer = http::post(&client, &url, &body).await;
            (i, sent.elapsed().as_secs_f64() * 1000.0, answer)
        });
    }
    let mut out = Outcome {
        answers: vec![None; stream.bodies.len()],
        ..Default::default()
    };
    while let Some(joined) = tasks.join_next().await {
        let (i, ms, answer) =
            joined.map_err(|e| BenchError::Setup(format!("request task failed: {e}")))?;
        bar.inc(1);
        match answer {
            Ok((200, v)) => {
                out.latencies_ms.push(ms);
                out.prompt_tokens += v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
                out.cached_tokens += v["usage"]["cached_tokens"].as_u64().unwrap_or(0);
                out.user_prefix += usize::from(v["prefix"] == "user");
                out.answers[i] = Some(v);
            }
            Ok((status, v)) => {
                out.errors += 1;
                out.first_error
                    .get_or_insert_with(|| format!("/v1/rank answered {status}: {v}"));
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    out.wall_s = began.elapsed().as_secs_f64();
    out.latencies_ms.sort_by(f64::total_cmp);
    Ok(out)
}
