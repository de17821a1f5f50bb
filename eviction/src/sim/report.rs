//! Result rows: the JSON shape (CONTRACT: exactly these fields) and the
//! human-readable table.

use std::io::Write;

use serde::Serialize;

use super::SimError;
use super::runner::Run;

/// One (policy, capacity, noise) result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimRow {
    pub policy: String,
    /// Fraction of the trace's distinct blocks.
    pub capacity: f64,
    pub capacity_blocks: usize,
    pub noise: f64,
    /// "none", "oracle" or "lightgbm".
    pub predictor: String,
    pub refs: u64,
    pub hits: u64,
    pub hit_ratio: f64,
    pub evictions: u64,
    /// Blocks the predictor was asked to predict.
    pub predictor_calls: u64,
    pub wall_s: f64,
    pub refs_per_s: f64,
    /// Seconds the run waited for LightGBM models to install (the simulator installs each at
    /// a fixed request count for determinism; a server never waits).
    pub train_wait_s: f64,
    /// refs / (wall_s - train_wait_s): the cost of the cache and policy path alone.
    pub refs_per_s_serving: f64,
}

impl SimRow {
    pub fn new(
        policy: &str,
        capacity: f64,
        capacity_blocks: usize,
        noise: f64,
        predictor: &str,
        run: &Run,
    ) -> Self {
        let ratio = |a: u64, b: f64| if b > 0.0 { a as f64 / b } else { 0.0 };
        let wait = (run.stats.predictor.as_ref()).map_or(0.0, |p| p.install_wait_us as f64 / 1e6);
        Self {
            policy: policy.to_string(),
            capacity,
            capacity_blocks,
            noise,
            predictor: predictor.to_string(),
            refs: run.refs,
            hits: run.hits,
            hit_ratio: ratio(run.hits, run.refs as f64),
            evictions: run.evictions,
            predictor_calls: run.predictor_calls,
            wall_s: run.wall_s,
            refs_per_s: ratio(run.refs, run.wall_s),
            train_wait_s: wait,
            refs_per_s_serving: ratio(run.refs, run.wall_s - wait),
        }
    }
}

pub fn write_json(out: &mut impl Write, rows: &[SimRow]) -> Result<(), SimError> {
    serde_json::to_writer(&mut *out, rows).map_err(|e| SimError::Output(e.into()))?;
    writeln!(out).map_err(SimError::Output)
}

pub fn write_table(
    out: &mut impl Write,
    rows: &[SimRow],
    distinct: usize,
    requests: usize,
) -> Result<(), SimError> {
    let w = |out: &mut dyn Write, s: String| writeln!(out, "{s}").map_err(SimError::Output);
    w(
        out,
        format!("{requests} requests, {distinct} distinct blocks"),
    )?;
    w(
        out,
        format!(
            "{:<7} {:>8} {:>8} {:>5} {:>9} {:>9} {:>9} {:>9} {:>11}",
            "policy",
            "capacity",
            "blocks",
            "noise",
            "predictor",
            "hit_ratio",
            "evictions",
            "pred_rows",
            "refs/s"
        ),
    )?;
    for r in rows {
        w(
            out,
            format!(
                "{:<7} {:>8.3} {:>8} {:>5.2} {:>9} {:>9.4} {:>9} {:>9} {:>11.0}",
                r.policy,
                r.capacity,
                r.capacity_blocks,
                r.noise,
                r.predictor,
                r.hit_ratio,
                r.evictions,
                r.predictor_calls,
                r.refs_per_s
            ),
        )?;
    }
    Ok(())
}
