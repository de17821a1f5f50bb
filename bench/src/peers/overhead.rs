//! The `overhead` workload: each system in front of one static-JSON upstream (the built-in
//! one), POST /v1/completions with the same text prompt: latency at concurrency 1 (what the
//! gateway adds to a request) and requests/s at `--concurrency` (what it keeps of the
//! upstream's throughput), each phase paired with the upstream loaded directly just before it.
//! wrk is the load generator when on PATH (as the peers' own numbers are usually quoted),
//! else the built-in one; load generator, gateway and upstream share this machine's cores.

use serde_json::{Value, json};

use super::args::PeersArgs;
use super::system::{self, RecacheSetup, System};
use crate::error::BenchError;
use crate::overhead::{measure, use_wrk};
use crate::static_upstream;

/// The overhead rows' `model`: the static upstream runs none.
pub const STATIC_MODEL: &str = "none (static upstream)";

/// The request every system gets: a short text completion, as a client would send it.
fn body() -> String {
    let words = "the quick brown fox jumps over the lazy dog ".repeat(12);
    json!({"model": "tiny-qwen2", "prompt": words.trim_end(), "max_tokens": 1}).to_string()
}

/// One round: each system (in `order`) at concurrency 1 and `--concurrency`, each phase paired
/// with the upstream loaded directly just before it. Returns one row per system.
pub async fn round(
    args: &PeersArgs,
    venv: &std::path::Path,
    order: &[System],
    round: u32,
) -> Result<Vec<Value>, BenchError> {
    let use_wrk = use_wrk(&args.load);
    let b = body();
    let phase = |addr, concurrency| {
        measure(
            use_wrk,
            addr,
            "/v1/completions",
            Some(&b),
            concurrency,
            args.duration,
        )
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
        let d1 = phase(upstream.addr, 1).await?;
        let p1 = phase(running.addr, 1).await?;
        let dn = phase(upstream.addr, args.concurrency).await?;
        let pn = phase(running.addr, args.concurrency).await?;
        drop(running);
        rows.push(json!({
            "system": s.name(), "workload": "overhead", "round": round,
            // A static upstream answers: no model runs (the body's name is only a name).
            "model": STATIC_MODEL,
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
            // A static JSON upstream stands in for the engine: no model runs.
            "model": "none (static upstream)",
        }));
    }
    Ok(rows)
}
