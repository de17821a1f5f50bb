//! A closed-loop HTTP/1 load generator: `concurrency` keep-alive connections, each sending its
//! next request (a GET, or a POST of a fixed JSON body) as soon as the previous response has
//! been read in full, for a fixed duration.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::error::BenchError;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct LoadResult {
    pub requests: u64,
    pub errors: u64,
    pub rps: f64,
    /// Per-request latencies in microseconds, sorted.
    pub latencies_us: Vec<u64>,
}

impl LoadResult {
    /// The q-quantile (0..=1) of latency in microseconds.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let idx = ((self.latencies_us.len() - 1) as f64 * q).round() as usize;
        self.latencies_us[idx] as f64
    }
}

/// Loads `addr` with GET `path` for `duration` after `warmup`.
pub async fn run(
    addr: SocketAddr,
    path: &str,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<LoadResult, BenchError> {
    run_with(addr, path, None, concurrency, warmup, duration).await
}

/// As [`run`], POSTing `body` (JSON) when given, else GETting.
pub async fn run_with(
    addr: SocketAddr,
    path: &str,
    body: Option<Bytes>,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<LoadResult, BenchError> {
    let start = Instant::now() + warmup;
    let end = start + duration;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let path = path.to_string();
        let body = body.clone();
        workers.spawn(async move { worker(addr, path, body, start, end).await });
    }
    let (mut requests, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
    while let Some(joined) = workers.join_next().await {
        let (lat, errs) =
            joined.map_err(|e| BenchError::Setup(format!("load worker panicked: {e}")))??;
        requests += lat.len() as u64;
        errors += errs;
        latencies.extend(lat);
    }
    latencies.sort_unstable();
    Ok(LoadResult {
        requests,
        errors,
        rps: requests as f64 / duration.as_secs_f64(),
        latencies_us: latencies,
    })
}

async fn worker(
    addr: SocketAddr,
    path: String,
    body: Option<Bytes>,
    start: Instant,
    end: Instant,
) -> Result<(Vec<u64>, u64), BenchError> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(BenchError::io(format!("connecting to {addr}")))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| BenchError::Setup(format!("HTTP handshake with {addr}: {e}")))?;
    tokio::spawn(conn);
    let (mut latencies, mut errors) = (Vec::new(), 0u64);
    loop {
        let sent = Instant::now();
        if sent >= end {
            break;
        }
        let req = match &body {
            Some(b) => Request::post(path.as_str())
                .header("host", addr.to_string())
                .header("content-type", "application/json")
                .body(Full::new(b.clone())),
            None => Request::get(path.as_str())
                .header("host", addr.to_string())
                .body(Full::new(Bytes::new())),
        };
        let req = req.map_err(|e| BenchError::Setup(format!("building request: {e}")))?;
        let ok = match sender.send_request(req).await {
            Ok(resp) => resp.status().is_success() && resp.into_body().collect().await.is_ok(),
            Err(_) => false,
        };
        if !ok {
            errors += 1;
            if sender.ready().await.is_err() {
                break;
            }
            continue;
        }
        if sent >= start {
            latencies.push(sent.elapsed().as_micros() as u64);
        }
    }
    Ok((latencies, errors))
}
