//! Sends one mode's request stream through recache's `/v1/rank` with [`crate::open_loop`]:
//! each request is released at its sampled arrival time and waits for one of `concurrency`
//! slots. At an offered load (open loop) a request's latency counts from its planned arrival,
//! so queueing is in it; in a closed loop (every arrival at 0) there is no planned arrival
//! and latency is the service time, from the moment the request is sent.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::open_loop;
use crate::progress::Progress;

/// What recache answered over one mode's run.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Successful requests' latencies, sorted: from the planned arrival in an open loop, from
    /// sending in a closed loop ([`Stream::open`]).
    pub latencies_ms: Vec<f64>,
    /// Successful requests' service times (from sending), sorted.
    pub service_ms: Vec<f64>,
    pub errors: usize,
    pub first_error: Option<String>,
    /// Seconds from the first planned arrival to the last answer.
    pub wall_s: f64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// Query–key pairs the computed tokens attended, summed over requests (each request's
    /// `usage.cached_tokens` is its prefix in KV: [`crate::costfit::fit::pairs`]).
    pub attended_pairs: u64,
    pub user_prefix: usize,
    /// Each request's answer by its index in the stream (`None`: an error), for callers that
    /// read the rankings (`bench quality`).
    pub answers: Vec<Option<Value>>,
}

pub struct Stream<'a> {
    pub bodies: &'a [Arc<Value>],
    pub arrivals_s: &'a [f64],
    pub concurrency: usize,
    /// Arrivals are an offered load (latency from arrival), not a closed loop.
    pub open: bool,
}

pub async fn run(
    client: &HttpClient,
    rank_url: &str,
    stream: &Stream<'_>,
    request_mode: &str,
    salt: &dyn Fn(usize) -> String,
    bar: &Progress,
) -> Result<Outcome, BenchError> {
    // Bodies are made before the clock starts: the first arrivals must not wait for them.
    let bodies: Vec<Arc<Value>> = (stream.bodies.iter().enumerate())
        .map(|(i, body)| {
            let mut body = (**body).clone();
            body["mode"] = json!(request_mode);
            body["cache_salt"] = json!(salt(i));
            Arc::new(body)
        })
        .collect();
    let send = |i: usize| {
        let (client, url, body) = (client.clone(), rank_url.to_string(), bodies[i].clone());
        async move { http::post(&client, &url, &body).await }
    };
    let Some(arrivals) = stream.arrivals_s.get(..bodies.len()) else {
        return Err(BenchError::Setup(format!(
            "{} requests but {} arrival times",
            bodies.len(),
            stream.arrivals_s.len()
        )));
    };
    let done = open_loop::run(arrivals, Some(stream.concurrency), send, || bar.inc(1)).await;
    let mut out = Outcome {
        answers: vec![None; bodies.len()],
        wall_s: done.wall_s,
        ..Default::default()
    };
    for answer in done.answers {
        let timed = answer.map_err(BenchError::Setup)?;
        match timed.value {
            Ok((200, v)) => {
                out.latencies_ms.push(match stream.open {
                    true => timed.latency_ms,
                    false => timed.service_ms,
                });
                out.service_ms.push(timed.service_ms);
                let prompt = v["usage"]["prompt_tokens"].as_u64().unwrap_or(0);
                let cached = v["usage"]["cached_tokens"]
                    .as_u64()
                    .unwrap_or(0)
                    .min(prompt);
                out.prompt_tokens += prompt;
                out.cached_tokens += cached;
                out.attended_pairs += crate::costfit::fit::pairs(cached, prompt - cached);
                out.user_prefix += usize::from(v["prefix"] == "user");
                out.answers[timed.index] = Some(v);
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
    out.latencies_ms.sort_by(f64::total_cmp);
    out.service_ms.sort_by(f64::total_cmp);
    Ok(out)
}
