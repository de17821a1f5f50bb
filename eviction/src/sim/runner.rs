//! Runs the (policy × capacity × noise) grid and hands rows to the report.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget};

use super::SimError;
use super::args::{PredictorKind, SimArgs};
use super::predictor::{self, Sources};
use super::report::{self, SimRow};
use crate::cache::{Access, Cache};
use crate::future::FutureIndex;
use crate::policy::{self, PolicyConfig, PolicyEnv};
use crate::predict::Predictor;
use crate::trace::{self, Request};

/// Result of one simulation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Run {
    pub refs: u64,
    pub hits: u64,
    pub evictions: u64,
    /// Rows (blocks) the predictor was asked to predict.
    pub predictor_calls: u64,
    pub wall_s: f64,
    pub stats: crate::policy::PolicyStats,
}

/// Simulates one policy at `capacity` blocks over `requests`.
#[allow(clippy::too_many_arguments)]
pub fn simulate(
    requests: &[Request],
    cfg: &PolicyConfig,
    capacity: usize,
    future: &Arc<FutureIndex>,
    predictor: Option<Box<dyn Predictor>>,
    in_flight: usize,
    progress: &ProgressBar,
) -> Result<Run, SimError> {
    let env = PolicyEnv {
        capacity,
        predictor,
        future: Some(future.clone()),
    };
    let mut cache = Cache::new(capacity, policy::build(cfg, env)?).in_flight(in_flight);
    let mut run = Run::default();
    let start = Instant::now();
    for (t, req) in requests.iter().enumerate() {
        // Chains and entity context are derived per request (cheap next to the cache work,
        // and a plain request has one chain and none).
        let chains = req.chains();
        let entities = req.entities();
        let access = Access {
            blocks: &req.hash_ids,
            chains: &chains,
            input_tokens: req.input_length,
            entities: &entities,
        };
        let out = cache
            .serve(&access, t as u64)
            .map_err(|source| SimError::Cache {
                policy: cfg.name().to_string(),
                source,
            })?;
        run.refs += req.hash_ids.len() as u64;
        run.hits += out.hits as u64;
        if t % 512 == 511 {
            progress.inc(512);
        }
    }
    progress.inc(requests.len() as u64 % 512);
    run.wall_s = start.elapsed().as_secs_f64();
    run.evictions = cache.evictions();
    run.stats = cache.policy_stats();
    run.predictor_calls = run.stats.predictor.as_ref().map_or(0, |p| p.predict_rows);
    Ok(run)
}

fn check(args: &SimArgs) -> Result<(), SimError> {
    if let Some(c) = args.capacity.iter().find(|c| !(**c > 0.0 && **c <= 1.0)) {
        return Err(SimError::BadArg(format!("--capacity {c} is not in (0, 1]")));
    }
    if let Some(p) = args.noise.iter().find(|p| !(0.0..=1.0).contains(*p)) {
        return Err(SimError::BadArg(format!("--noise {p} is not in [0, 1]")));
    }
    if args.policies.is_empty() || args.noise.is_empty() {
        return Err(SimError::BadArg("empty --policies or --noise".into()));
    }
    Ok(())
}

/// The requests `--skip` and `--requests` select; none is an error.
fn window<T>(mut requests: Vec<T>, skip: usize, n: Option<usize>) -> Result<Vec<T>, SimError> {
    requests.drain(..skip.min(requests.len()));
    requests.truncate(n.unwrap_or(usize::MAX));
    if requests.is_empty() {
        return Err(SimError::BadArg(format!(
            "no requests to replay after --skip {skip}{}",
            n.map_or(String::new(), |n| format!(" --requests {n}"))
        )));
    }
    Ok(requests)
}

/// Draws `--plot FILE` from the result rows (an error message on failure). The simulator
/// itself links no plotting library; `recache-bench` passes one.
pub type Plotter<'a> = &'a dyn Fn(&std::path::Path, &[SimRow]) -> Result<(), String>;

/// Runs the simulator: results to stdout (JSON array with `--json`, else a
/// table), a progress bar to stderr, the `--plot` PNG by `plot`. `--plot` without a plotter
/// is refused before anything runs.
pub fn run(args: &SimArgs, plot: Option<Plotter<'_>>) -> Result<(), SimError> {
    check(args)?;
    if let (Some(path), None) = (&args.plot, plot) {
        return Err(SimError::NoPlotter(path.clone()));
    }
    let configs = args
        .policies
        .iter()
        .map(|p| PolicyConfig::from_spec(p.trim()))
        .collect::<Result<Vec<_>, _>>()?;
    let requests = window(trace::load_mooncake(&args.trace)?, args.skip, args.requests)?;
    let future = Arc::new(FutureIndex::new(
        requests.iter().map(|r| r.hash_ids.as_slice()),
    ));
    let distinct = future.distinct();
    let sources = Sources::new(&requests, future.clone());
    let capacities: Vec<(f64, usize)> = match args.capacity_blocks {
        Some(n) => vec![(n as f64 / distinct as f64, n)],
        None => args
            .capacity
            .iter()
            .map(|&f| (f, (f * distinct as f64).floor() as usize))
            .collect(),
    };
    let runs_per_cap: usize = configs
        .iter()
        .map(|c| if noisy(c, args) { args.noise.len() } else { 1 })
        .sum();
    let total = (runs_per_cap * capacities.len() * requests.len()) as u64;
    let progress = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    let mut rows = Vec::new();
    for &(fraction, blocks) in &capacities {
        for cfg in &configs {
            let label = cfg_label(cfg);
            let pname = if cfg.predictor() == Some(crate::policy::PredictorChoice::Reuse) {
                "reuse"
            } else if cfg.uses_predictor() {
                args.predictor.name()
            } else {
                "none"
            };
            let mut shared: Option<Run> = None;
            for &noise in &args.noise {
                let run = match (&shared, noisy(cfg, args)) {
                    (Some(r), false) => r.clone(),
                    _ => {
                        let p = if cfg.uses_predictor() {
                            Some(predictor::build(args, cfg, noise, &sources)?)
                        } else {
                            None
                        };
                        let r = simulate(
                            &requests,
                            cfg,
                            blocks,
                            &future,
                            p,
                            args.in_flight,
                            &progress,
                        )?;
                        if args.stats {
                            let s = serde_json::to_string(&r.stats).unwrap_or_default();
                            progress.suspend(|| eprintln!("{} {blocks} {noise}: {s}", cfg.name()));
                        }
                        shared = Some(r.clone());
                        r
                    }
                };
                rows.push(SimRow::new(&label, fraction, blocks, noise, pname, &run));
            }
        }
    }
    progress.finish_and_clear();
    let mut out = std::io::stdout().lock();
    if args.json {
        report::write_json(&mut out, &rows)?;
    } else {
        report::write_table(&mut out, &rows, distinct, requests.len())?;
    }
    out.flush().map_err(SimError::Output)?;
    if let (Some(path), Some(draw)) = (&args.plot, plot) {
        draw(path, &rows).map_err(|msg| SimError::Plot {
            path: path.clone(),
            msg,
        })?;
    }
    Ok(())
}

/// Whether the noise values change this policy's result.
fn noisy(cfg: &PolicyConfig, args: &SimArgs) -> bool {
    cfg.uses_predictor()
        && args.predictor == PredictorKind::Oracle
        && cfg.predictor() != Some(crate::policy::PredictorChoice::Reuse)
}

/// The policy name as shown in results: the tag, plus the params that differ from the
/// default, as `name:key=value` (the spelling `--policies` takes).
fn cfg_label(cfg: &PolicyConfig) -> String {
    let json = |c: &PolicyConfig| match serde_json::to_value(c) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let default = PolicyConfig::from_name(cfg.name())
        .map(|d| json(&d))
        .unwrap_or_default();
    let mut label = cfg.name().to_string();
    for (k, v) in json(cfg).iter().filter(|(k, _)| *k != "policy") {
        if default.get(k) != Some(v) {
            match v {
                serde_json::Value::String(s) => label.push_str(&format!(":{k}={s}")),
                _ => label.push_str(&format!(":{k}={v}")),
            }
        }
    }
    label
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_show_non_default_params_as_specs() {
        for spec in [
            "laru",
            "laru:lambda_min_misses=1",
            "laru:features=base+gr",
            "hf:candidates=8",
        ] {
            let cfg = PolicyConfig::from_spec(spec).expect("valid");
            assert_eq!(cfg_label(&cfg), spec);
        }
    }

    #[test]
    fn skip_and_requests_select_a_window_and_refuse_an_empty_one() {
        let r: Vec<u32> = (0..10).collect();
        assert_eq!(window(r.clone(), 0, None).expect("all"), r);
        assert_eq!(
            window(r.clone(), 3, Some(4)).expect("3..7"),
            vec![3, 4, 5, 6]
        );
        assert_eq!(window(r.clone(), 8, Some(5)).expect("tail"), vec![8, 9]);
        let err = window(r.clone(), 10, None).expect_err("nothing left");
        assert!(err.to_string().contains("--skip 10"), "{err}");
        assert!(window(r, 0, Some(0)).is_err());
    }
}
