//! TEMPORARY: stand-ins until workload::plan_bat/population and report::summarize/
//! table_summary/plot_sweep land (another engineer writes them). Deleted then.

use super::report::ModeResult;
use super::workload::{Data, Planned, Shape};
use crate::bench::BenchError;

pub struct Population {
    pub distinct_users: usize,
    pub returning_share: f64,
}

pub fn plan_bat(data: &Data, shape: &Shape, seed: u64) -> Result<Vec<Planned>, BenchError> {
    super::workload::plan(data, shape, seed)
}

pub fn population(plan: &[Planned]) -> Population {
    let mut seen = std::collections::HashSet::new();
    let returning = plan.iter().filter(|p| !seen.insert(p.user)).count();
    Population {
        distinct_users: seen.len(),
        returning_share: returning as f64 / plan.len().max(1) as f64,
    }
}

#[derive(serde::Serialize)]
pub struct Summary {
    pub mode: String,
}

pub fn summarize(rows: &[ModeResult]) -> Vec<Summary> {
    rows.iter()
        .map(|r| Summary {
            mode: r.mode.clone(),
        })
        .collect()
}

pub fn table_summary(_: &[Summary]) -> String {
    String::new()
}

pub fn plot_sweep(_: &std::path::Path, _: &[Summary]) -> Result<(), BenchError> {
    Ok(())
}
