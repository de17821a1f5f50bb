//! The output: one JSON document (run facts, calibration, `rows`, the raw `runs`, the `goal`
//! object computed from the rows) or, without `--json`, a text table and the goal lines.

use serde_json::{Value, json};

use super::args::{Arrivals, SloArgs};
use super::calibrate::Calibration;
use super::tally::{Row, Run};

/// Issue 17's goals: at 2× saturation SLO goodput ≥ 2.3× plain's with ≥ 90% of admitted
/// requests on time; at 0.5× SLO costs ≤ 2% of throughput and of p50.
const RATIO: f64 = 2.3;
const ADMITTED: f64 = 0.9;
const COST: f64 = 0.02;

/// Everything a run knows besides its rows.
pub struct Facts<'a> {
    pub args: &'a SloArgs,
    pub engine: recache_adapters::Engine,
    pub model: &'a str,
    pub cal: &'a Calibration,
}

fn pair(rows: &[Row], load: f64) -> Option<(&Row, &Row)> {
    let at = |mode: &str| {
        rows.iter()
            .find(|r| r.mode == mode && (r.load - load).abs() < 1e-9)
    };
    Some((at("plain")?, at("slo")?))
}

/// NaN and infinities as JSON null.
fn num(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

/// The goal object: each part `null` when its load was not run. At 2×: goodput ratio slo /
/// plain. At 0.5×: `throughput_cost` = (plain − slo) / plain of answered-2xx per second,
/// `p50_cost` = (slo − plain) / plain of the admitted p50; a negative cost is a gain.
pub fn goal(rows: &[Row]) -> Value {
    let at2 = pair(rows, 2.0).map(|(p, s)| {
        let ratio = s.goodput_rps / p.goodput_rps; // inf when plain's goodput is 0
        let met = ratio >= RATIO && s.admitted_attainment >= ADMITTED;
        json!({
            "plain_goodput_rps": num(p.goodput_rps), "slo_goodput_rps": num(s.goodput_rps),
            "goodput_ratio": num(ratio), "plain_goodput_zero": p.goodput_rps == 0.0,
            "slo_admitted_attainment": num(s.admitted_attainment),
            "target_ratio": RATIO, "target_admitted_attainment": ADMITTED, "met": met,
        })
    });
    let at05 = pair(rows, 0.5).map(|(p, s)| {
        let throughput_cost = (p.throughput_rps - s.throughput_rps) / p.throughput_rps;
        let p50_cost = (s.p50_ms - p.p50_ms) / p.p50_ms;
        json!({
            "plain_throughput_rps": num(p.throughput_rps), "slo_throughput_rps": num(s.throughput_rps),
            "throughput_cost": num(throughput_cost),
            "plain_p50_ms": num(p.p50_ms), "slo_p50_ms": num(s.p50_ms), "p50_cost": num(p50_cost),
            // Context, not part of the test: refusals cost throughput but not goodput.
            "plain_goodput_rps": num(p.goodput_rps), "slo_goodput_rps": num(s.goodput_rps),
            "limit": COST, "met": throughput_cost <= COST && p50_cost <= COST,
        })
    });
    json!({"at_2x": at2, "at_0_5x": at05})
}

pub fn document(f: &Facts<'_>, rows: &[Row], runs: &[Run]) -> Value {
    let a = f.args;
    json!({
        "bench": "slo",
        "upstream": a.upstream(), "engine": f.engine.name(), "model": f.model,
        "saturation_rps": num(f.cal.saturation_rps),
        "unloaded_p50_ms": num(f.cal.unloaded_p50_ms),
        "deadline_ms": f.cal.deadline_ms, "deadline_from": f.cal.deadline_from,
        "best_effort": a.best_effort,
        "arrivals": a.arrivals, "cv": (a.arrivals == Arrivals::Gamma).then_some(a.cv),
        "duration": a.duration.as_secs_f64(), "warmup": a.warmup.as_secs_f64(),
        "exact_count": a.exact_count, "repeat": a.repeat, "loads": a.loads,
        "seed": a.seed, "rank_mode": a.rank_mode,
        "request_timeout_s": a.request_timeout.as_secs_f64(),
        "calibration": f.cal,
        "rows": rows, "runs": runs, "goal": goal(rows),
        "notes": "rows: medians over repeats (spread: min/max); goodput_rps = on_time / \
                  duration; attainment = on_time / offered; admitted_attainment = on_time / \
                  (offered - rejected); p50/p99 over admitted requests from their scheduled \
                  time, a timed-out one counted at the time it was given up; with warmup > 0 \
                  every run's arrivals start warmup s before its measured window, and those \
                  requests are counted only in the run's `warmup`",
    })
}

pub fn table(f: &Facts<'_>, rows: &[Row]) -> String {
    let c = f.cal;
    let mut s = format!(
        "saturation {:.3} rps, unloaded p50 {:.0} ms, deadline {} ms ({}), {:?} arrivals, \
         {:.0} s per run after {:.0} s of warm-up, {} repeat(s)\n",
        c.saturation_rps,
        c.unloaded_p50_ms,
        c.deadline_ms,
        c.deadline_from,
        f.args.arrivals,
        f.args.duration.as_secs_f64(),
        f.args.warmup.as_secs_f64(),
        f.args.repeat
    );
    s += &format!(
        "{:>5} {:<5} {:>7} {:>6} {:>7} {:>8} {:>6} {:>8} {:>6} {:>7} {:>7} {:>7} {:>11}\n",
        "load",
        "mode",
        "offered",
        "ok",
        "on_time",
        "rejected",
        "errors",
        "goodput",
        "attain",
        "adm_att",
        "p50_ms",
        "p99_ms",
        "goodput_rng"
    );
    for r in rows {
        let g = r.spread.get("goodput_rps");
        s += &format!(
            "{:>5} {:<5} {:>7} {:>6} {:>7} {:>8} {:>6} {:>8.3} {:>6.3} {:>7.3} {:>7.0} {:>7.0} {:>11}\n",
            r.load,
            r.mode,
            r.offered,
            r.ok,
            r.on_time,
            r.rejected,
            r.errors,
            r.goodput_rps,
            r.attainment,
            r.admitted_attainment,
            r.p50_ms,
            r.p99_ms,
            g.map_or(String::new(), |g| format!("{:.2}-{:.2}", g.min, g.max)),
        );
    }
    s + &format!("goal: {}\n", goal(rows))
}
