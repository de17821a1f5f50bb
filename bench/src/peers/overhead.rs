//! The `overhead` workload: each system in front of one static-JSON upstream (the built-in
//! one), POST /v1/completions with the same text prompt: latency at concurrency 1 (what the
//! gateway adds to a request) and requests/s at `--concurrency` (what it keeps of the
//! upstream's throughput), each phase paired with the upstream loaded directly just before it.
//! wrk is the load generator when on PATH (as the peers' own numbers are usually quoted),
//! else the built-in one; load generator, gateway and upstream share this machine's cores.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::args::PeersArgs;
use super::system::{self, RecacheSetup, System};
use crate::error::BenchError;
use crate::{loadgen, static_upstream, wrk};

/// The request every system gets: a short text completion, as a client would send it.
fn body() -> String {
    let words = "the quick brown fox jumps over the lazy dog ".repeat(12);
    json!({"model": "tiny-qwen2", "prompt": words.trim_end(), "max_tokens": 1}).to_string()
}

/// One phase's reading: requests/s, p50 and p99 in µs, errors.
struct Phase {
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    errors: u64,
}

async fn phase(
    use_wrk: bool,
    addr: std::net::SocketAddr,
    concurrency: usize,
    duration: Duration,
) -> Result<Phase, BenchError> {
    let b = body();
    if use_wrk {
        // wrk has no warm-up: a short unmeasured run opens the connections first.
        let _ = wrk::run_with(
            addr,
            "/v1/completions",
            Some(&b),
            concurrency,
            Duration::from_secs(1),
        )?;
        let r = wrk::run_with(addr, "/v1/completions", Some(&b), concurrency, duration)?;
        return Ok(Phase {
            rps: r.rps,
            p50_us: r.p50_us,
            p99_us: r.p99_us,
            errors: r.errors,
        });
    }
    let warmup = Duration::from_millis(500);
    let r = loadgen::run_with(
        addr,
        "/v1/completions",
        Some(Bytes::from(b)),
        concurrency,
        warmup,
        duration,
    )
    .await?;
    Ok(Phase {
        rps: r.rps,
        p50_us: r.quantile_us(0.5),
        p99_us: r.quantile_us(0.99),
        errors: r.errors,
    })
}

/// One round: each system (in `order`) at concurrency 1 and `--concurrency`, each phase paired
/// with the upstream loaded directly just before it. Returns one row per system.
pub async fn round(
    args: &PeersArgs,
    venv: &std::path::Path,
    order: &[System],
    round: u32,
) -> Result<Vec<Value>, BenchError> {
    let use_wrk = match args.load.as_str() {
        "wrk" => true,
        "builtin" => false,
        _ => wrk::available(),
    };
    let upstream = static_upstream::spawn()?;
    let replicas = [format!("http://{}", upstream.addr)];
    let mut rows = Vec::new();
    for &s in order {
        eprintln!(
            "[peers] overhead round {round}: {} (and direct beside it) ...",
            s.name()
        );
        let running = system::start(s, venv, &replicas, &RecacheSetup::default()).await?;
        // Direct and through the system back to back, per phase: a paired reading (an idle
        // core wakes slowly, so a direct reading taken apart from its pair would drift).
        let d1 = phase(use_wrk, upstream.addr, 1, args.duration).await?;
        let p1 = phase(use_wrk, running.addr, 1, args.duration).await?;
        let dn = phase(use_wrk, upstream.addr, args.concurrency, args.duration).await?;
        let pn = phase(use_wrk, running.addr, args.concurrency, args.duration).await?;
        drop(running);
        rows.push(json!({
            "system": s.name(), "workload": "overhead", "round": round,
            "rps": pn.rps, "rps_vs_direct": pn.rps / dn.rps,
            "added_p50_us": p1.p50_us - d1.p50_us, "added_p99_us": p1.p99_us - d1.p99_us,
            "p50_us": p1.p50_us, "p99_us": p1.p99_us,
            "direct_p50_us": d1.p50_us, "direct_rps": dn.rps,
            // No engine: the "first token" is the whole answer, latency at concurrency 1.
            "ttft_p50_ms": p1.p50_us / 1e3, "ttft_p99_ms": p1.p99_us / 1e3,
            "hit_rate": null, "max_share": null, "computed_tokens": null, "kv_bytes": null,
            "errors": p1.errors + pn.errors + d1.errors + dn.errors,
            "concurrency": args.concurrency, "duration_s": args.duration.as_secs_f64(),
            "load": if use_wrk { "wrk" } else { "builtin" },
        }));
    }
    Ok(rows)
}
