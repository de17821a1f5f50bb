//! `recache sim` flags (CONTRACT, see the crate README).

use std::path::PathBuf;

use crate::predict::FeatureSet;
use crate::predict::features::TrainRows;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// JSONL: {"timestamp","input_length","output_length","hash_ids":[...]}
    Mooncake,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PredictorKind {
    /// Online-trained LightGBM (needs the `lightgbm` feature).
    Lightgbm,
    /// True next access from the trace, corrupted with probability --noise.
    Oracle,
    /// Idle age against the reuse distances seen so far (no model; `predict::reuse`).
    Reuse,
    /// The reuse predictor told by the trace's future whether a block is used again, not
    /// when: an upper bound for rules that see only idle age (simulator only).
    ReuseOracle,
    /// The reuse predictor told when a block that is used again comes back, and a phantom
    /// return for one that is not: an upper bound for rules that cannot see whether a
    /// conversation goes on (simulator only).
    WhenOracle,
}

impl PredictorKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Lightgbm => "lightgbm",
            Self::Oracle => "oracle",
            Self::Reuse => "reuse",
            Self::ReuseOracle => "reuse-oracle",
            Self::WhenOracle => "when-oracle",
        }
    }
}

/// Replays a trace against eviction policies and reports hit ratios.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// Trace file.
    #[arg(long)]
    pub trace: PathBuf,
    /// Trace format.
    #[arg(long, value_enum, default_value_t = TraceFormat::Mooncake)]
    pub format: TraceFormat,
    /// Requests dropped from the start of the trace before replaying (a shifted stream: how
    /// much a policy's hit ratio moves when its stream starts a few requests later).
    #[arg(long, default_value_t = 0)]
    pub skip: usize,
    /// Requests replayed after --skip [default: the rest of the trace].
    #[arg(long)]
    pub requests: Option<usize>,
    /// Policies, comma-separated: lru, lfu, sieve, fpb, hf, laru, opt, dead-first;
    /// parameters as `name:key=value`, e.g. `laru:lambda_min_misses=1`.
    #[arg(long, value_delimiter = ',', default_value = "lru,laru,opt")]
    pub policies: Vec<String>,
    /// Capacities as fractions of the trace's distinct blocks.
    #[arg(long, value_delimiter = ',', default_value = "0.05")]
    pub capacity: Vec<f64>,
    /// One absolute capacity in blocks (replaces --capacity).
    #[arg(long)]
    pub capacity_blocks: Option<usize>,
    /// Oracle noise probabilities p (only the oracle predictor uses them).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub noise: Vec<f64>,
    /// Predictor for fpb, hf and laru.
    #[arg(long, value_enum, default_value_t = PredictorKind::Lightgbm)]
    pub predictor: PredictorKind,
    /// LightGBM feature set for learned policies that do not name one (`laru:features=...`):
    /// groups joined by '+': base (the default), gr (GR entity columns), future (true-future
    /// columns, an upper bound only the simulator can compute).
    #[arg(long, default_value = "base")]
    pub features: FeatureSet,
    /// LightGBM: a row whose block is not accessed again within this many requests is
    /// labelled "not reused" (censored) [default: 2000].
    #[arg(long)]
    pub label_horizon: Option<u64>,
    /// LightGBM: requests between sending a retrain and installing its model (the simulator
    /// installs at fixed points, for determinism) [default: 1000].
    #[arg(long)]
    pub install_after: Option<u64>,
    /// LightGBM training rows: one per block access, or one per radix node (the deepest of
    /// the blocks one access touches with the same history) [default: block].
    #[arg(long, value_enum)]
    pub train_rows: Option<TrainRows>,
    /// Print one JSON array to stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also draw hit ratio vs capacity and vs noise to this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Seed of the oracle's noise.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Print each run's policy/predictor counters (JSON) to stderr.
    #[arg(long)]
    pub stats: bool,
    /// Predict on a worker thread at each access (async mode; not
    /// reproducible) instead of in a batch at each decision (sync mode).
    #[arg(long)]
    pub async_predict: bool,
    /// Install LightGBM models as soon as trained (faster, not reproducible).
    #[arg(long)]
    pub background_training: bool,
    /// Requests in flight at once, as in an engine at that concurrency: a request's blocks
    /// stay pinned until this many minus one more have arrived (1: one at a time).
    #[arg(long, default_value_t = 1)]
    pub in_flight: usize,
}
