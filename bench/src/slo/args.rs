//! `recache bench slo`'s command line and its checks. The flags of the contract (`--upstream`,
//! `--data`, `--items`, `--loads`, `--json`) keep their names: scripts depend on them.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::BenchError;

/// How requests arrive in the open loop.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrivals {
    /// Exponential inter-arrival times (CV 1).
    Poisson,
    /// Gamma inter-arrival times with coefficient of variation `--cv` (bursty for CV > 1).
    Gamma,
}

#[derive(clap::Args, Debug, Clone)]
pub struct SloArgs {
    /// The engine's base URL, e.g. http://127.0.0.1:8000 (both modes' recache children front it)
    #[arg(long)]
    pub upstream: String,
    /// Interaction file: one line per user, `user_id item_id item_id ...` in time order
    #[arg(long)]
    pub data: PathBuf,
    /// Item file: JSON object `{"<index>": {"title": ...}}`; item id i takes title i mod count
    #[arg(long)]
    pub items: PathBuf,
    /// Offered loads as multiples of the measured saturation rate
    #[arg(long, value_delimiter = ',', default_value = "0.5,1,2,3")]
    pub loads: Vec<f64>,
    /// Print one JSON document on stdout (else a table)
    #[arg(long)]
    pub json: bool,
    /// Write a PNG: attainment and goodput against offered load, one line per mode
    #[arg(long)]
    pub png: Option<PathBuf>,
    /// Arrival process of the open loop
    #[arg(long, value_enum, default_value = "gamma")]
    pub arrivals: Arrivals,
    /// Coefficient of variation of gamma inter-arrival times (shape 1/cv², scale 1/(rate·shape))
    #[arg(long, default_value_t = 3.0)]
    pub cv: f64,
    /// Arrival window per (load, mode) run; outstanding requests are awaited after it
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Arrivals before each run's measured window, at the run's rate and process: sent and
    /// answered but not counted (their numbers are the run's `warmup`), so the measured window
    /// sees a replica already under that load rather than one coming out of idle (the slo
    /// child's offered-load estimate looks back 10 s)
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// Every run (and its warm-up) gets exactly round(rate × length) arrivals: the gaps of the
    /// arrival process scaled to fill the window, so bursts keep their shape and a run's load
    /// is its nominal load (free-running, a 30 s gamma CV 3 window drew 0.2-3x it)
    #[arg(long)]
    pub exact_count: bool,
    /// Runs of every (load, mode); plain and slo alternate which goes first per repeat.
    /// With N > 1 rows give medians, and `spread` the min/max of goodput and attainment
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Every request's deadline (x-recache-deadline-ms) [default: 3 × the unloaded p50]
    #[arg(long)]
    pub deadline_ms: Option<u64>,
    /// Every request also asks to be served late rather than refused (x-recache-best-effort:
    /// 1): the slo child then refuses only while the engine is offered more than it serves
    #[arg(long)]
    pub best_effort: bool,
    /// Requests in flight in the closed loop that measures the saturation rate
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Length of that closed loop
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub calibrate: Duration,
    /// Sequential requests that measure the unloaded p50 (after 2 uncounted warm-up requests)
    #[arg(long, default_value_t = 8)]
    pub unloaded_requests: usize,
    /// A request unanswered after this long counts as an error (`timeout`)
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Seed of the workload and of the arrival sequences
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The `/v1/rank` request's `mode`: user_prefix, item_prefix or auto
    #[arg(long, default_value = "user_prefix")]
    pub rank_mode: String,
    /// Served model name [default: the engine's first model]
    #[arg(long)]
    pub model: Option<String>,
    /// The engine's dialect: vllm or sglang [default: detected]
    #[arg(long)]
    pub engine: Option<recache_adapters::Engine>,
    /// Longest prompt the workload makes (the longest history maps to it)
    #[arg(long, default_value_t = 8192)]
    pub max_prompt_tokens: usize,
    /// Profile tokens of a user with a one-item history
    #[arg(long, default_value_t = 1024)]
    pub min_profile_tokens: usize,
    /// Candidates per request (the held-out item + popularity-drawn others)
    #[arg(long, default_value_t = 100)]
    pub candidates: usize,
    /// Tokens per item text
    #[arg(long, default_value_t = 18)]
    pub item_tokens: usize,
    /// Distinct active users the stream draws from (by activity)
    #[arg(long, default_value_t = 64)]
    pub users: usize,
}

impl SloArgs {
    /// Values that cannot give a meaningful run, named by flag.
    pub fn check(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::Setup(m));
        if self.loads.is_empty() || self.loads.iter().any(|l| !l.is_finite() || *l <= 0.0) {
            return bad(format!(
                "--loads must be finite and > 0, got {:?}",
                self.loads
            ));
        }
        if self.repeat == 0 || self.concurrency == 0 || self.unloaded_requests == 0 {
            return bad(
                "--repeat, --concurrency and --unloaded-requests must be at least 1".into(),
            );
        }
        if self.arrivals == Arrivals::Gamma && !(self.cv.is_finite() && self.cv > 0.0) {
            return bad(format!("--cv must be finite and > 0, got {}", self.cv));
        }
        for (flag, d) in [
            ("--duration", self.duration),
            ("--calibrate", self.calibrate),
            ("--request-timeout", self.request_timeout),
        ] {
            if d.is_zero() {
                return bad(format!("{flag} must be above 0"));
            }
        }
        if self.deadline_ms == Some(0) {
            return bad("--deadline-ms must be above 0".into());
        }
        if !["user_prefix", "item_prefix", "auto"].contains(&self.rank_mode.as_str()) {
            return bad(format!(
                "--rank-mode must be user_prefix, item_prefix or auto, got {:?}",
                self.rank_mode
            ));
        }
        for (flag, p) in [("--data", &self.data), ("--items", &self.items)] {
            if !p.is_file() {
                return bad(format!("{flag} {}: no such file", p.display()));
            }
        }
        Ok(())
    }

    /// What every request asks of the slo child: `deadline_ms`, and best effort if set.
    pub fn ask(&self, deadline_ms: u64) -> super::send::Ask {
        super::send::Ask {
            deadline_ms,
            best_effort: self.best_effort,
        }
    }

    /// The upstream without a trailing slash.
    pub fn upstream(&self) -> String {
        self.upstream.trim_end_matches('/').to_string()
    }
}
