//! `recache bench soak`: does recache hold over time? A `recache serve` child process (the
//! real binary, as users run it) in front of `--upstream` gets mixed load for `--minutes`:
//! plain and streamed completions, `/v1/rank` requests and `GET /v1/models`, while the
//! eviction policy is hot-swapped through the admin API every `--swap-every`. Prints one JSON
//! object: requests, errors (total and by kind), the child's RSS and open file descriptors
//! after warm-up and at the end, swaps that succeeded, p50/p99 and p99 per minute.
//!
//! Ranking requests are synthetic (seeded users and a Zipf-like catalog of token-id items), so
//! no data files are needed. Request errors are results, not failures: the command exits
//! non-zero only when it cannot start (the child, the upstream).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::error::BenchError;
use crate::http::HttpClient;
use crate::http::{client, first_model};
use crate::stats::pct;

/// Eviction policies the swaps cycle through.
const POLICIES: [&str; 6] = ["lru", "laru", "lfu", "sieve", "hf", "fpb"];
const TOKEN: &str = "soak-admin-token";
/// One request may take this long before it counts as a `timeout` error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// The engine's base URL, e.g. http://127.0.0.1:8000
    #[arg(long)]
    pub upstream: String,
    /// How long to run (fractions allowed, e.g. 0.5)
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Requests in flight at once (the testbed is a CPU engine: keep it small)
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Time between eviction-policy hot-swaps
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub swap_every: Duration,
    /// The engine's KV-event publisher, passed to the child (turns the engine loop on)
    #[arg(long)]
    pub kv_events: Option<String>,
    /// Print the JSON object only (else a summary line too)
    #[arg(long)]
    pub json: bool,
}

/// What the run saw.
#[derive(Default)]
struct Tally {
    by_kind: [u64; 4],
    errors: std::collections::BTreeMap<&'static str, u64>,
    /// (minute, latency ms) per finished request.
    latencies: Vec<(usize, f64)>,
}

const KINDS: [&str; 4] = ["completion", "stream", "rank", "models"];

pub async fn run(args: SoakArgs) -> Result<(), BenchError> {
    if args.minutes.is_nan() || args.minutes <= 0.0 || args.concurrency == 0 {
        return Err(BenchError::Setup(
            "--minutes must be above 0 and --concurrency at least 1".into(),
        ));
    }
    let http = client();
    let upstream = args.upstream.trim_end_matches('/').to_string();
    let model = first_model(&http, &upstream)
        .await
        .map_err(|e| BenchError::Setup(format!("--upstream {upstream} is not usable: {e}")))?;
    let addr = free_port()?;
    let mut child = spawn(addr, &upstream, args.kv_events.as_deref())?;
    let base = format!("http://{addr}");
    wait_ready(&http, &base, &mut child.0).await?;
    let pid = child.0.id();
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let warmup = (total / 6).min(Duration::from_secs(10));
    let started = Instant::now();
    let stop = started + total;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let seq = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (http, base, model, tally, seq) = (
            http.clone(),
            base.clone(),
            model.clone(),
            tally.clone(),
            seq.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while Instant::now() < stop {
                let n = seq.fetch_add(1, Ordering::Relaxed);
                let kind = (n % 4) as usize;
                let t = Instant::now();
                let outcome = one(&http, &base, &model, kind, n).await;
                let mut tally = tally.lock().await;
                tally.by_kind[kind] += 1;
                match outcome {
                    Ok(()) => {
                        let minute = (t - started).as_secs() as usize / 60;
                        tally
                            .latencies
                            .push((minute, t.elapsed().as_secs_f64() * 1e3));
                    }
                    Err(kind) => *tally.errors.entry(kind).or_insert(0) += 1,
                }
            }
        }));
    }
    // Warm-up, then the baseline RSS; swaps and progress until the end.
    tokio::time::sleep(warmup).await;
    let (rss_start, fds_start) = (rss_kb(pid), fds(pid));
    let mut swaps = 0u64;
    let mut last_progress = Instant::now();
    let progress = crate::progress::Progress::new(total.as_secs().max(1), "soak (seconds)");
    let mut i = 0usize;
    while Instant::now() < stop {
        tokio::time::sleep(
            args.swap_every
                .min(stop.saturating_duration_since(Instant::now())),
        )
        .await;
        if Instant::now() >= stop {
            break;
        }
        i += 1;
        let body = json!({"policy": POLICIES[i % POLICIES.len()]});
        match swap(&http, &base, &body).await {
            true => swaps += 1,
            false => *tally.lock().await.errors.entry("swap").or_insert(0) += 1,
        }
        progress.set(started.elapsed().as_secs());
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            let t = tally.lock().await;
            progress.line(&format!(
                "soak: {:>5.0}s / {:.0}s, {} requests, {} errors, {swaps} swaps",
                started.elapsed().as_secs_f64(),
                total.as_secs_f64(),
                t.latencies.len() as u64 + t.errors.values().sum::<u64>(),
                t.errors.values().sum::<u64>()
            ));
        }
    }
    progress.finish();
    for t in tasks {
        let _ = t.await;
    }
    let (rss_end, fds_end) = (rss_kb(pid), fds(pid));
    let t = tally.lock().await;
    let out = report(
        &args,
        &t,
        swaps,
        (rss_start, rss_end),
        (fds_start, fds_end),
        warmup,
    );
    drop(child);
    if !args.json {
        eprintln!(
            "soak: {} requests, {} errors, {} swaps, RSS {} -> {} kB",
            out["requests"], out["errors"], swaps, rss_start, rss_end
        );
    }
    println!("{out}");
    Ok(())
}

fn report(
    args: &SoakArgs,
    t: &Tally,
    swaps: u64,
    (rss_start, rss_end): (u64, u64),
    (fds_start, fds_end): (u64, u64),
    warmup: Duration,
) -> Value {
    let errors: u64 = t.errors.values().sum();
    let mut all: Vec<f64> = t.latencies.iter().map(|l| l.1).collect();
    all.sort_by(f64::total_cmp);
    let minutes = t.latencies.iter().map(|l| l.0).max().map_or(0, |m| m + 1);
    let per_minute: Vec<f64> = (0..minutes)
        .map(|m| {
            let mut v: Vec<f64> = t
                .latencies
                .iter()
                .filter(|l| l.0 == m)
                .map(|l| l.1)
                .collect();
            v.sort_by(f64::total_cmp);
            round(pct(&v, 0.99))
        })
        .collect();
    let growth = if rss_start > 0 {
        (rss_end as f64 - rss_start as f64) / rss_start as f64 * 100.0
    } else {
        0.0
    };
    json!({
        "upstream": args.upstream, "minutes": args.minutes, "concurrency": args.concurrency,
        "requests": t.by_kind.iter().sum::<u64>(), "errors": errors, "errors_by_kind": t.errors,
        "by_kind": KINDS.iter().zip(t.by_kind).map(|(k, n)| (k.to_string(), json!(n)))
            .collect::<serde_json::Map<_, _>>(),
        "swaps": swaps, "rss_start_kb": rss_start, "rss_end_kb": rss_end,
        "rss_growth_pct": round(growth), "fds_start": fds_start, "fds_end": fds_end,
        "p50_ms": round(pct(&all, 0.5)), "p99_ms": round(pct(&all, 0.99)),
        "p99_ms_per_minute": per_minute,
        "notes": format!(
            "RSS and fds at start are read after {:.0} s of warm-up; rank requests are \
             synthetic (token ids); swaps cycle eviction policies through PUT \
             /admin/eviction-policy", warmup.as_secs_f64()),
    })
}

/// One request of `kind`; Err names the error kind.
async fn one(
    http: &HttpClient,
    base: &str,
    model: &str,
    kind: usize,
    n: u64,
) -> Result<(), &'static str> {
    let (method, path, body) = match kind {
        0 => (
            Method::POST,
            "/v1/completions",
            json!({"model": model, "prompt": prompt(n), "max_tokens": 4}),
        ),
        1 => (
            Method::POST,
            "/v1/completions",
            json!({"model": model, "prompt": prompt(n), "max_tokens": 8, "stream": true}),
        ),
        2 => (Method::POST, "/v1/rank", rank(model, n)),
        _ => (Method::GET, "/v1/models", Value::Null),
    };
    let mut req = Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    let bytes = if body.is_null() {
        Bytes::new()
    } else {
        req = req.header("content-type", "application/json");
        Bytes::from(body.to_string())
    };
    let req = req.body(Full::new(bytes)).map_err(|_| "build")?;
    let answered = tokio::time::timeout(REQUEST_TIMEOUT, async {
        let resp = http.request(req).await.map_err(|_| "connect")?;
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|_| "stream_truncated")?;
        Ok::<_, &'static str>((status, body.to_bytes()))
    })
    .await
    .map_err(|_| "timeout")??;
    let (status, body) = answered;
    if status.is_server_error() {
        return Err("status_5xx");
    }
    if !status.is_success() {
        return Err("status_4xx");
    }
    if kind == 1 && !String::from_utf8_lossy(&body).contains("[DONE]") {
        return Err("stream_truncated");
    }
    Ok(())
}

/// Prompts with shared prefixes (8 users) so the engine's cache and the policies have work.
fn prompt(n: u64) -> Vec<u32> {
    let user = (n / 4) % 8;
    (0..96u64)
        .map(|t| 1000 + ((user * 131 + t * 17 + if t >= 64 { n } else { 0 }) % 2000) as u32)
        .collect()
}

/// A ranking request: one of 16 users, 8 candidates from a 64-item catalog, hot items first.
fn rank(model: &str, n: u64) -> Value {
    let user = (n * 7) % 16;
    let items: Vec<Value> = (0..8u64)
        .map(|k| {
            // Squaring a uniform draw favours low ids: a few hot items, a long tail.
            let r = ((n.wrapping_mul(2654435761).wrapping_add(k * 40503)) % 1000) as f64 / 1000.0;
            let id = ((r * r) * 64.0) as u64 + k * 64;
            json!({"id": format!("i{id}"), "tokens": (0..6).map(|t| 600 + ((id * 13 + t) % 3000) as u32).collect::<Vec<_>>()})
        })
        .collect();
    json!({"model": model, "user": {"id": format!("u{user}"),
           "tokens": (0..48).map(|t| 700 + ((user * 37 + t) % 2500) as u32).collect::<Vec<_>>()},
           "items": items, "top_k": 3})
}

async fn swap(http: &HttpClient, base: &str, body: &Value) -> bool {
    let req = Request::builder()
        .method(Method::PUT)
        .uri(format!("{base}/admin/eviction-policy"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())));
    let Ok(req) = req else { return false };
    match http.request(req).await {
        Ok(resp) => {
            let ok = resp.status().is_success();
            let _ = resp.into_body().collect().await;
            ok
        }
        Err(_) => false,
    }
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// `recache serve` as a child process, killed on drop.
struct ServeChild(Child);

impl Drop for ServeChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(
    listen: SocketAddr,
    upstream: &str,
    kv_events: Option<&str>,
) -> Result<ServeChild, BenchError> {
    let exe = crate::recache_bin::path()?;
    let mut cmd = Command::new(exe);
    cmd.args([
        "serve",
        "--listen",
        &listen.to_string(),
        "--upstream",
        upstream,
    ])
    .args(["--admin-token", TOKEN, "--health-interval", "1s"])
    .env("RECACHE_LOG", "warn")
    .stdin(Stdio::null());
    if let Some(ev) = kv_events {
        cmd.args(["--kv-events", ev]);
    }
    let child = cmd
        .spawn()
        .map_err(BenchError::io("starting recache serve"))?;
    Ok(ServeChild(child))
}

fn free_port() -> Result<SocketAddr, BenchError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(BenchError::io("finding a free port"))?;
    l.local_addr()
        .map_err(BenchError::io("finding a free port"))
}

async fn wait_ready(http: &HttpClient, base: &str, child: &mut Child) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(BenchError::Setup(format!(
                "recache serve exited early: {status}"
            )));
        }
        let probe = Request::get(format!("{base}/ready")).body(Full::new(Bytes::new()));
        if let Ok(req) = probe
            && let Ok(resp) = http.request(req).await
            && resp.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(BenchError::Setup(
        "recache serve was not ready within 30 s".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_requests_are_valid_and_reuse_prefixes() {
        for n in 0..64 {
            let body = rank("m", n).to_string();
            recache::harness::rank_api::parse(body.as_bytes(), 128).expect("a valid /v1/rank body");
        }
        // Requests of one user share their first 64 tokens and differ after.
        assert_eq!(prompt(0)[..64], prompt(1)[..64]);
        assert_ne!(prompt(0), prompt(1));
    }

    #[test]
    fn percentiles_and_per_minute_p99() {
        let t = Tally {
            by_kind: [2, 1, 0, 0],
            errors: [("status_5xx", 1)].into_iter().collect(),
            latencies: vec![(0, 10.0), (0, 30.0), (1, 50.0)],
        };
        let args = SoakArgs {
            upstream: "http://e:1".into(),
            minutes: 2.0,
            concurrency: 1,
            swap_every: Duration::from_secs(3),
            kv_events: None,
            json: true,
        };
        let v = report(
            &args,
            &t,
            7,
            (1000, 1050),
            (20, 20),
            Duration::from_secs(10),
        );
        assert_eq!(v["requests"], 3);
        assert_eq!(v["errors"], 1);
        assert_eq!(v["swaps"], 7);
        assert_eq!(v["rss_growth_pct"], 5.0);
        assert_eq!(v["p99_ms_per_minute"], json!([30.0, 50.0]));
    }
}
