//! What the loads are relative to, measured through the plain child before any run: the
//! unloaded latency (sequential requests, p50) that sets the default deadline (3 × p50), and
//! the engine's saturation rate (a closed loop at `--concurrency` for `--calibrate`). Then a
//! few requests through the SLO child, so its online cost model has seen the engine.

use serde::Serialize;

use super::args::SloArgs;
use super::send::{self, Answer};
use super::workload::Workload;
use crate::error::BenchError;
use crate::http::HttpClient;
use crate::stats::quantile;

/// Requests the closed loop cycles through (more than a CPU engine serves in seconds).
const SATURATION_BODIES: usize = 512;
/// Uncounted requests before the unloaded ones (connections, first-shape compilation).
const WARM_UP: usize = 2;
/// Requests sent through the SLO child before its first run.
const SLO_WARM_UP: usize = 4;

#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub saturation_rps: f64,
    pub saturation_concurrency: usize,
    pub saturation_s: f64,
    pub saturation_requests: usize,
    pub saturation_p50_ms: f64,
    pub saturation_errors: usize,
    pub unloaded_p50_ms: f64,
    pub unloaded_requests: usize,
    pub deadline_ms: u64,
    /// `--deadline-ms`, or `3x_unloaded_p50`.
    pub deadline_from: &'static str,
}

pub async fn run(
    http: &HttpClient,
    plain: &str,
    slo: &str,
    wl: &Workload,
    args: &SloArgs,
) -> Result<Calibration, BenchError> {
    let timeout = args.request_timeout;
    let n = args.unloaded_requests + WARM_UP;
    let bodies = wl.bodies(n, &args.rank_mode, "unloaded")?;
    eprintln!(
        "bench slo: unloaded latency ({} sequential requests) ...",
        args.unloaded_requests
    );
    let mut unloaded = Vec::new();
    for (i, body) in bodies.into_iter().enumerate() {
        let t0 = tokio::time::Instant::now();
        match send::one(http, plain, body, None, timeout).await {
            Answer::Ok if i >= WARM_UP => unloaded.push(t0.elapsed().as_secs_f64() * 1e3),
            Answer::Ok => {}
            other => {
                return Err(BenchError::Setup(format!(
                    "calibration: /v1/rank through the plain recache failed ({other:?}); is \
                     --upstream an engine that serves /v1/rank's scoring request?"
                )));
            }
        }
    }
    unloaded.sort_by(f64::total_cmp);
    let unloaded_p50_ms = quantile(&unloaded, 0.5);
    let (deadline_ms, deadline_from) = match args.deadline_ms {
        Some(ms) => (ms, "--deadline-ms"),
        None => (
            ((3.0 * unloaded_p50_ms).ceil() as u64).max(1),
            "3x_unloaded_p50",
        ),
    };
    eprintln!(
        "bench slo: unloaded p50 {unloaded_p50_ms:.0} ms, deadline {deadline_ms} ms \
         ({deadline_from}); saturation: closed loop at concurrency {} for {:.0} s ...",
        args.concurrency,
        args.calibrate.as_secs_f64()
    );
    let bodies = wl.bodies(SATURATION_BODIES, &args.rank_mode, "saturation")?;
    let (done, mut lat, errors) = send::closed_loop(
        http,
        plain,
        &bodies,
        args.concurrency,
        args.calibrate,
        timeout,
    )
    .await;
    if done == 0 {
        return Err(BenchError::Setup(format!(
            "calibration: no request finished within --calibrate {:?} at concurrency {} \
             ({errors} errors); give a longer --calibrate",
            args.calibrate, args.concurrency
        )));
    }
    lat.sort_by(f64::total_cmp);
    let saturation_rps = done as f64 / args.calibrate.as_secs_f64();
    eprintln!("bench slo: saturation {saturation_rps:.3} requests/s ({done} in the window)");
    for body in wl.bodies(SLO_WARM_UP, &args.rank_mode, "slo-warm-up")? {
        let _ = send::one(http, slo, body, Some(args.ask(deadline_ms)), timeout).await;
    }
    Ok(Calibration {
        saturation_rps,
        saturation_concurrency: args.concurrency,
        saturation_s: args.calibrate.as_secs_f64(),
        saturation_requests: done,
        saturation_p50_ms: quantile(&lat, 0.5),
        saturation_errors: errors,
        unloaded_p50_ms,
        unloaded_requests: unloaded.len(),
        deadline_ms,
        deadline_from,
    })
}
