//! `recache bench predictor` stand-alone: timings (LightGBM training on 20k rows, batch
//! prediction of 25k rows), then per feature set the ranking quality against OPT's decisions
//! and the FPB/LARU hit ratios it buys.
//! `cargo run --release -p recache-bench --example bench_predictor -- --trace FILE
//!  [--capacity 0.05] [--feature-sets base,base+gr] [--json] [--timing-only]`

use clap::Parser;
use recache_bench::predictor::{PredictorArgs, run};

#[derive(Parser)]
#[command(name = "bench_predictor", about = "Eviction predictor benchmark")]
struct Cli {
    #[command(flatten)]
    args: PredictorArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(&cli.args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("error: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            eprintln!("{msg}");
            std::process::ExitCode::FAILURE
        }
    }
}
