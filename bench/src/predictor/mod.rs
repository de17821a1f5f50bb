//! `recache bench predictor`: the learned predictor's cost (LightGBM training and
//! prediction timings, [`timing`]) and, per feature set, its ranking quality against OPT's
//! decisions with the hit ratios it buys ([`quality`]). [`PredictorArgs`] are the
//! subcommand's flags (the sidecar embeds them); [`run`] prints JSON lines.

mod error;
mod quality;
mod record;
mod timing;

use std::io::Write;
use std::path::PathBuf;

pub use error::BenchError;
pub use quality::{QualityRow, auc, report as quality_report};
pub use record::Recording;
pub use timing::{PredictorBench, bench_predictor, rows_from_trace, run_predictor_bench};

use recache_eviction::predict::FeatureSet;

/// `recache bench predictor` flags.
#[derive(clap::Args, Debug, Clone)]
pub struct PredictorArgs {
    /// Block-hash trace (Mooncake JSONL, GR segments allowed) to build feature rows from
    #[arg(long)]
    pub trace: PathBuf,
    /// Capacity (fraction of the trace's distinct blocks) for OPT's labels and hit ratios
    #[arg(long, default_value_t = 0.05)]
    pub capacity: f64,
    /// Feature sets to compare, comma-separated; groups joined by '+': base, gr, future.
    /// An upper-bound row (their union plus `future`) is added unless one has `future`
    #[arg(long, value_delimiter = ',', default_value = "base,base+gr")]
    pub feature_sets: Vec<FeatureSet>,
    /// JSON lines: the timing object first (as before), then one object per feature set.
    /// Without it: the timing object, then a table
    #[arg(long)]
    pub json: bool,
    /// Timings only (the report before issue 18)
    #[arg(long)]
    pub timing_only: bool,
    /// Most feature rows evaluated; longer traces are sampled evenly
    #[arg(long, default_value_t = 400_000)]
    pub max_rows: usize,
}

/// Runs the benchmark and prints it to stdout.
pub fn run(args: &PredictorArgs) -> Result<(), BenchError> {
    if !(args.capacity > 0.0 && args.capacity <= 1.0) {
        return Err(BenchError::BadArg(format!(
            "--capacity {} is not in (0, 1]",
            args.capacity
        )));
    }
    let requests = recache_eviction::trace::load_mooncake(&args.trace)?;
    let (x, y) = rows_from_trace(&requests);
    let timing = bench_predictor(&x, &y, 20_000, 25_000, 5)?;
    let mut out = std::io::stdout().lock();
    let line = |out: &mut dyn Write, v: String| writeln!(out, "{v}").map_err(BenchError::Output);
    line(&mut out, serde_json::to_string(&timing).unwrap_or_default())?;
    out.flush().map_err(BenchError::Output)?;
    if args.timing_only {
        return Ok(());
    }
    let name = args.trace.display().to_string();
    let rows = quality::report(
        &requests,
        &name,
        args.capacity,
        &args.feature_sets,
        args.max_rows,
    )?;
    if args.json {
        for r in &rows {
            line(&mut out, serde_json::to_string(r).unwrap_or_default())?;
        }
    } else {
        line(
            &mut out,
            format!(
                "{:<20} {:>5} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>7} {:>6} {:>9}",
                "features",
                "ub",
                "auc_gap",
                "auc_opt",
                "train_ms",
                "lru",
                "opt",
                "fpb",
                "laru",
                "gap%",
                "laru_r/s"
            ),
        )?;
        for r in &rows {
            line(
                &mut out,
                format!(
                    "{:<20} {:>5} {:>7.3} {:>7.3} {:>7.3} {:>7.3} {:>8.1} {:>7.4} {:>7.4} {:>7.4} {:>7.4} {:>6.1} {:>9.0}",
                    r.features,
                    r.upper_bound,
                    r.auc_gap,
                    r.auc_opt,
                    r.auc_gap_reused,
                    r.auc_opt_reused,
                    r.train_ms,
                    r.lru_hit_ratio,
                    r.opt_hit_ratio,
                    r.fpb_hit_ratio,
                    r.laru_hit_ratio,
                    r.laru_gap_closed * 100.0,
                    r.laru_refs_per_s
                ),
            )?;
        }
    }
    out.flush().map_err(BenchError::Output)
}
