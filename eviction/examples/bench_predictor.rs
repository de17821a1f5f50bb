//! Predictor benchmark: prints JSON with LightGBM training time for 20k rows
//! and batch predict time for 25k rows.
//! `cargo run --release -p recache-eviction --example bench_predictor -- [TRACE]`
//! (default trace: ../shared/data/mooncake/conversation_trace.jsonl)

use std::path::PathBuf;

use recache_eviction::bench::run_predictor_bench;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).map_or_else(
        || PathBuf::from("../shared/data/mooncake/conversation_trace.jsonl"),
        PathBuf::from,
    );
    let report = run_predictor_bench(&path)?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}
