//! Sending one replay run: the trace's requests in order, at most `concurrency` in flight,
//! each streamed so the first chunk times the first token (TTFT).

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::trace::tokens;
use crate::error::BenchError;
use crate::http;

/// One run's timings, milliseconds: end to end and to the first streamed token, sorted; and
/// the TTFT again in trace order, so runs of the same stream can be compared request by
/// request ([`super::paired`]).
pub struct Timings {
    pub latency: Vec<f64>,
    pub ttft: Vec<f64>,
    pub ttft_by_request: Vec<f64>,
    pub wall_s: f64,
}

type Sent = Result<(usize, Result<(u16, f64, f64), BenchError>), tokio::task::JoinError>;

impl Timings {
    /// Adds one finished request; a refused one ends the run with its error.
    fn add(&mut self, done: Sent) -> Result<(), BenchError> {
        let (i, out) = done.map_err(|e| BenchError::Setup(format!("request task: {e}")))?;
        let (status, ttft, total) = out?;
        if status != 200 {
            return Err(BenchError::Setup(format!("request {i} answered {status}")));
        }
        self.ttft.push(ttft);
        self.latency.push(total);
        if let Some(slot) = self.ttft_by_request.get_mut(i) {
            *slot = ttft;
        }
        Ok(())
    }
}

/// Sends `reqs` in trace order through `url`, at most `concurrency` in flight (each released
/// when a slot frees up), each streamed so its first chunk times the first token.
pub async fn send_all(
    client: &crate::http::HttpClient,
    url: &str,
    model: &str,
    reqs: &[Vec<u64>],
    keep_tokens: Option<&[usize]>,
    concurrency: usize,
    progress: &crate::progress::Progress,
) -> Result<Timings, BenchError> {
    let slots = Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut tasks = tokio::task::JoinSet::new();
    let mut t = Timings {
        latency: Vec::with_capacity(reqs.len()),
        ttft: Vec::with_capacity(reqs.len()),
        ttft_by_request: vec![f64::NAN; reqs.len()],
        wall_s: 0.0,
    };
    let t0 = Instant::now();
    for (i, r) in reqs.iter().enumerate() {
        let mut body = json!({"model": model, "prompt": tokens(r, i as u64), "max_tokens": 1,
                              "temperature": 0, "stream": true});
        // recache's shadow keeps only the live prefix (the proxy takes the field out).
        if let Some(n) = keep_tokens.and_then(|k| k.get(i)) {
            body["recache_keep_tokens"] = json!(n);
        }
        let permit = slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| BenchError::Setup(format!("concurrency slots: {e}")))?;
        let (client, url) = (client.clone(), url.to_string());
        tasks.spawn(async move {
            let out = http::post_stream_timed(&client, &url, &body).await;
            drop(permit);
            (i, out)
        });
        while let Some(done) = tasks.try_join_next() {
            t.add(done)?;
            progress.inc(1);
        }
    }
    while let Some(done) = tasks.join_next().await {
        t.add(done)?;
        progress.inc(1);
    }
    t.wall_s = t0.elapsed().as_secs_f64();
    t.latency.sort_by(f64::total_cmp);
    t.ttft.sort_by(f64::total_cmp);
    Ok(t)
}
