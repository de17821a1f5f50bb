//! From one run's request ends to its numbers ([`Run`]), and from the runs of a (load, mode)
//! to its row ([`Row`]: the median of every field over repeats, the min/max of goodput and
//! attainment). Field names are the JSON contract.

use std::collections::BTreeMap;

use serde::Serialize;

use super::send::{Answer, Sample};
use crate::stats::Spread;
use crate::stats::quantile;

/// One (load, mode, repeat) run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub load: f64,
    pub mode: String,
    pub repeat: usize,
    /// Whether this mode ran first in its pair.
    pub first: bool,
    pub offered_rps: f64,
    /// Requests that arrived in the measured window per s: the rate the arrival process drew,
    /// which for bursty arrivals and short windows can be far from `offered_rps`.
    pub arrived_rps: f64,
    /// Requests sent, answered 2xx, 2xx within the deadline, refused with 429
    /// `deadline_unreachable`, anything else (timeouts, other statuses, connection errors).
    pub offered: usize,
    pub ok: usize,
    pub on_time: usize,
    pub rejected: usize,
    pub errors: usize,
    pub errors_by_kind: BTreeMap<String, usize>,
    /// on_time / duration; ok / duration.
    pub goodput_rps: f64,
    pub throughput_rps: f64,
    /// on_time / offered; on_time / (offered − rejected); rejected / offered.
    pub attainment: f64,
    pub admitted_attainment: f64,
    pub reject_rate: f64,
    /// Latency of the admitted (not refused) requests from their scheduled time; a timed-out
    /// request counts with the time it was given up at.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The requests of the warm-up before the measured window (`--warmup`), counted apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warmup: Option<Warmup>,
}

/// The warm-up's requests of a run: sent and answered like the others, left out of its
/// numbers, kept to show what the first seconds out of idle look like.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Warmup {
    pub offered: usize,
    pub ok: usize,
    pub on_time: usize,
    pub rejected: usize,
    pub errors: usize,
    /// on_time / (offered − rejected).
    pub admitted_attainment: f64,
}

impl Warmup {
    fn of(run: &Run) -> Self {
        Warmup {
            offered: run.offered,
            ok: run.ok,
            on_time: run.on_time,
            rejected: run.rejected,
            errors: run.errors,
            admitted_attainment: run.admitted_attainment,
        }
    }
}

/// A run whose arrivals began `warmup_s` before its measured window: the samples of requests
/// scheduled before `warmup_s` (`times` in s, one per sample) go to its `warmup`, the rest
/// make its numbers. With `warmup_s` 0 it is [`tally`].
pub fn tally_after_warmup(w: &Which<'_>, times: &[f64], samples: &[Sample], warmup_s: f64) -> Run {
    let cut = times.partition_point(|&t| t < warmup_s).min(samples.len());
    let mut run = tally(w, &samples[cut..]);
    if warmup_s > 0.0 {
        run.warmup = Some(Warmup::of(&tally(w, &samples[..cut])));
    }
    run
}

/// What a run was: its place in the bench, for [`tally`].
pub struct Which<'a> {
    pub load: f64,
    pub mode: &'a str,
    pub repeat: usize,
    pub first: bool,
    pub offered_rps: f64,
    pub duration_s: f64,
    pub deadline_ms: u64,
}

pub fn tally(w: &Which<'_>, samples: &[Sample]) -> Run {
    let deadline = w.deadline_ms as f64;
    let mut errors_by_kind = BTreeMap::new();
    let (mut ok, mut on_time, mut rejected) = (0, 0, 0);
    let mut admitted = Vec::new();
    for s in samples {
        match &s.answer {
            Answer::Ok => {
                ok += 1;
                on_time += usize::from(s.latency_ms <= deadline);
            }
            Answer::Rejected => rejected += 1,
            Answer::Error(kind) => *errors_by_kind.entry(kind.clone()).or_insert(0) += 1,
        }
        if s.answer != Answer::Rejected && s.latency_ms.is_finite() {
            admitted.push(s.latency_ms);
        }
    }
    admitted.sort_by(f64::total_cmp);
    let offered = samples.len();
    let ratio = |a: usize, b: usize| {
        if b == 0 {
            f64::NAN
        } else {
            a as f64 / b as f64
        }
    };
    Run {
        load: w.load,
        mode: w.mode.to_string(),
        repeat: w.repeat,
        first: w.first,
        offered_rps: w.offered_rps,
        arrived_rps: offered as f64 / w.duration_s,
        offered,
        ok,
        on_time,
        rejected,
        errors: errors_by_kind.values().sum(),
        errors_by_kind,
        goodput_rps: on_time as f64 / w.duration_s,
        throughput_rps: ok as f64 / w.duration_s,
        attainment: ratio(on_time, offered),
        admitted_attainment: ratio(on_time, offered - rejected),
        reject_rate: ratio(rejected, offered),
        p50_ms: quantile(&admitted, 0.5),
        p99_ms: quantile(&admitted, 0.99),
        warmup: None,
    }
}

/// Min and max of one number over a row's runs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

/// One (load, mode): medians over its runs (counts too, so a median of 2 runs may be x.5).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub load: f64,
    pub mode: String,
    pub offered_rps: f64,
    pub runs: usize,
    pub goodput_rps: f64,
    pub attainment: f64,
    pub admitted_attainment: f64,
    pub throughput_rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub rejected: f64,
    pub reject_rate: f64,
    pub offered: f64,
    pub ok: f64,
    pub on_time: f64,
    pub errors: f64,
    /// Over the runs: goodput_rps and attainment.
    pub spread: BTreeMap<&'static str, Range>,
}

/// Rows per (load, mode), in order of first appearance.
pub fn summarize(runs: &[Run]) -> Vec<Row> {
    let mut groups: Vec<Vec<&Run>> = Vec::new();
    for r in runs {
        match groups
            .iter_mut()
            .find(|g| g[0].mode == r.mode && g[0].load.to_bits() == r.load.to_bits())
        {
            Some(g) => g.push(r),
            None => groups.push(vec![r]),
        }
    }
    groups
        .into_iter()
        .map(|g| {
            let med = |f: fn(&Run) -> f64| Spread::of(g.iter().map(|r| f(r))).median;
            let range = |f: fn(&Run) -> f64| {
                let s = Spread::of(g.iter().map(|r| f(r)));
                Range {
                    min: s.min,
                    max: s.max,
                }
            };
            Row {
                load: g[0].load,
                mode: g[0].mode.clone(),
                offered_rps: med(|r| r.offered_rps),
                runs: g.len(),
                goodput_rps: med(|r| r.goodput_rps),
                attainment: med(|r| r.attainment),
                admitted_attainment: med(|r| r.admitted_attainment),
                throughput_rps: med(|r| r.throughput_rps),
                p50_ms: med(|r| r.p50_ms),
                p99_ms: med(|r| r.p99_ms),
                rejected: med(|r| r.rejected as f64),
                reject_rate: med(|r| r.reject_rate),
                offered: med(|r| r.offered as f64),
                ok: med(|r| r.ok as f64),
                on_time: med(|r| r.on_time as f64),
                errors: med(|r| r.errors as f64),
                spread: BTreeMap::from([
                    ("goodput_rps", range(|r| r.goodput_rps)),
                    ("attainment", range(|r| r.attainment)),
                ]),
            }
        })
        .collect()
}
