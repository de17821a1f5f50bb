//! The online quality guard (`--rank-quality-sample F`, `--rank-quality-min X`): does the
//! pooled layout still rank like user-first for this model and recompute setting?
//!
//! A sampled share of pool-served rankings is scored again in the background ([`shadow`]),
//! off the request path: user-first in the request's order (the reference) and user-first in
//! the reverse order. The answer already served is never touched, and a shadow that fails or
//! times out is only counted and logged. Why the second one: a ranker's own order sensitivity
//! sets how far two rankings of one request can agree at all. The trained testbed ranker
//! agrees with itself on 13% of the top 10 when only the candidates' order changes (its label
//! tokens carry order-dependent noise), so an absolute overlap would call any layout bad. The
//! guard judges the **relative agreement**: the pooled ranking's top-10 overlap with the
//! reference divided by the reversed ranking's, both means over the last [`WINDOW`] samples
//! of a (model, recompute setting) pair ([`agreement`]). 1 means the pool changes rankings no
//! more than reordering the candidates does.
//!
//! Once [`MIN_SAMPLES`] are in and the pooled overlap is below `--rank-quality-min` times the
//! reversed one by more than [`Z`] standard errors of the window (per sample, the margin
//! `pooled - min * reversed`), the pool is off for that pair: bat chooses among the other
//! layouts, fills go on, and a warning says why. Why a confidence bound and not the ratio of
//! the means: both overlaps sit near chance for the testbed ranker (0.12 and 0.09 of the top
//! 10, where chance is 0.10), so a window's ratio swings by ±0.35 and crossed 0.75 by chance
//! on the ranker trained pooled (mean 1.27); the bound turns the pool off only on evidence. While it is off, sampled requests are scored pooled as well (the probe), so the
//! guard sees the agreement recover (the margin above 0 by [`Z`] standard errors) and turns
//! the pool back on. Why a window and not a
//! lifetime mean: a model or setting swap, or a pool that refilled, changes the answer, and
//! old samples would hide it.

pub mod agreement;
pub mod shadow;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts};
use serde_json::{Value, json};

use self::agreement::Agreement;
use crate::metrics::Metrics;

/// Samples kept per (model, setting).
pub const WINDOW: usize = 64;
/// Samples before the guard judges.
pub const MIN_SAMPLES: usize = 16;
/// Standard errors by which the window's mean margin must clear 0 for a verdict (about 2.3%
/// one-sided per check when the true margin is 0).
pub const Z: f64 = 2.0;
/// Shadow scorings in flight at most: the guard's share of the engine stays bounded whatever
/// the request rate (a sampled request finding both slots busy is skipped and counted).
pub const MAX_IN_FLIGHT: usize = 2;

/// `--rank-quality-*` settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuardConfig {
    /// Share of eligible rankings scored again (0: the guard is off).
    pub sample: f64,
    /// Relative agreement (pooled vs reference top-10 overlap over reversed vs reference)
    /// below which the pool turns off.
    pub min: f64,
}

/// One sample: the pooled ranking against the reference (user-first, request order), and the
/// reversed user-first ranking against the same reference.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub pooled: Agreement,
    pub reversed: Agreement,
}

/// Window means of a pair's samples.
#[derive(Debug, Clone, Copy)]
struct Means {
    pooled: Agreement,
    reversed: Agreement,
}

impl Means {
    /// Pooled overlap over reversed overlap: 1 when the pool moves rankings no more than
    /// reordering does. A model that agrees with itself on nothing (reversed 0) is not
    /// judged by the pool: 1.
    fn relative(&self) -> f64 {
        if self.reversed.top_k_overlap <= 0.0 {
            1.0
        } else {
            self.pooled.top_k_overlap / self.reversed.top_k_overlap
        }
    }
}

/// No `Default`: a new pair starts with the pool on ([`Pair::new`]), not off.
struct Pair {
    samples: VecDeque<Sample>,
    pool_on: bool,
}

impl Pair {
    fn new() -> Self {
        Self {
            samples: VecDeque::new(),
            pool_on: true,
        }
    }

    /// Mean and standard error of the per-sample margin `pooled - min * reversed` (top-10
    /// overlaps): below 0 the pool moves rankings more than `min` allows.
    fn margin(&self, min: f64) -> (f64, f64) {
        let d: Vec<f64> = (self.samples.iter())
            .map(|s| s.pooled.top_k_overlap - min * s.reversed.top_k_overlap)
            .collect();
        let n = d.len() as f64;
        if d.is_empty() {
            return (0.0, 0.0);
        }
        let mean = d.iter().sum::<f64>() / n;
        let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        (mean, (var / n).sqrt())
    }

    fn means(&self) -> Option<Means> {
        let n = self.samples.len() as f64;
        let mean = |f: fn(&Sample) -> Agreement| Agreement {
            top_k_overlap: self.samples.iter().map(|s| f(s).top_k_overlap).sum::<f64>() / n,
            spearman: self.samples.iter().map(|s| f(s).spearman).sum::<f64>() / n,
        };
        (!self.samples.is_empty()).then(|| Means {
            pooled: mean(|s| s.pooled),
            reversed: mean(|s| s.reversed),
        })
    }
}

/// The guard's state: agreement per (model, recompute setting), and whether the pool is on.
pub struct QualityGuard {
    pub config: GuardConfig,
    pairs: Mutex<HashMap<(String, String), Pair>>,
    /// Sampling accumulator, in millionths: deterministic, so a share F samples exactly every
    /// 1/F-th eligible request.
    acc: AtomicU64,
    in_flight: AtomicUsize,
    metrics: GuardMetrics,
}

struct GuardMetrics {
    agreement: GaugeVec,
    pool_on: IntGaugeVec,
    samples: IntCounterVec,
    tokens: IntCounterVec,
}

impl QualityGuard {
    pub fn new(config: GuardConfig, registry: &Metrics) -> Result<Self, prometheus::Error> {
        let agreement = GaugeVec::new(
            Opts::new(
                "rank_quality_agreement",
                "Agreement of sampled rankings with user-first in the request's order, mean over \
                 the guard's window: top10_overlap and spearman of the pooled ranking, \
                 reversed_top10_overlap and reversed_spearman of user-first in reverse order, \
                 relative = top10_overlap / reversed_top10_overlap (what --rank-quality-min \
                 judges)",
            ),
            &["model", "setting", "measure"],
        )?;
        let pool_on = IntGaugeVec::new(
            Opts::new(
                "rank_quality_pool_on",
                "1 while the quality guard lets bat use the item pool for this model and \
                 recompute setting, 0 while it holds the pool off",
            ),
            &["model", "setting"],
        )?;
        let samples = IntCounterVec::new(
            Opts::new(
                "rank_quality_samples_total",
                "Shadow scorings by outcome: ok, failed, timeout, skipped (both slots busy)",
            ),
            &["model", "outcome"],
        )?;
        let tokens = IntCounterVec::new(
            Opts::new(
                "rank_quality_tokens_total",
                "Prompt tokens the engine computed (not cached) for the guard's shadow scorings",
            ),
            &["model"],
        )?;
        crate::metrics::register! { registry;
            agreement, pool_on, samples, tokens,
        }
        Ok(Self {
            config,
            pairs: Mutex::new(HashMap::new()),
            acc: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            metrics: GuardMetrics {
                agreement,
                pool_on,
                samples,
                tokens,
            },
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Pair>> {
        // A poisoned lock means a panic mid-update; each pair is still consistent.
        self.pairs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether bat may use the pool for `model` with `setting` (true until measured).
    pub fn pool_allowed(&self, model: &str, setting: &str) -> bool {
        (self.lock().get(&(model.to_string(), setting.to_string()))).is_none_or(|p| p.pool_on)
    }

    /// Whether this eligible request is sampled, and if so a slot for its shadow scoring
    /// (released when the returned guard drops). Counts a skip when no slot is free.
    pub fn sample(self: &Arc<Self>, model: &str) -> Option<Slot> {
        if self.config.sample <= 0.0 {
            return None;
        }
        let step = (self.config.sample.min(1.0) * 1e6) as u64;
        let before = self.acc.fetch_add(step, Ordering::Relaxed);
        if (before + step) / 1_000_000 == before / 1_000_000 {
            return None;
        }
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_IN_FLIGHT).then_some(n + 1)
            });
        if taken.is_err() {
            self.count(model, "skipped");
            return None;
        }
        Some(Slot(self.clone()))
    }

    pub fn count(&self, model: &str, outcome: &str) {
        self.metrics
            .samples
            .with_label_values(&[model, outcome])
            .inc();
    }

    pub fn count_tokens(&self, model: &str, computed: u64) {
        self.metrics
            .tokens
            .with_label_values(&[model])
            .inc_by(computed);
    }

    /// One sample for (model, setting); turns the pool off or on when the window says so,
    /// with a log line saying why.
    pub fn record(&self, model: &str, setting: &str, sample: Sample) {
        let mut pairs = self.lock();
        let pair = pairs
            .entry((model.to_string(), setting.to_string()))
            .or_insert_with(Pair::new);
        pair.samples.push_back(sample);
        while pair.samples.len() > WINDOW {
            pair.samples.pop_front();
        }
        let Some(means) = pair.means() else {
            return;
        };
        let relative = means.relative();
        let m = &self.metrics;
        for (measure, value) in [
            ("top10_overlap", means.pooled.top_k_overlap),
            ("spearman", means.pooled.spearman),
            ("reversed_top10_overlap", means.reversed.top_k_overlap),
            ("reversed_spearman", means.reversed.spearman),
            ("relative", relative),
        ] {
            m.agreement
                .with_label_values(&[model, setting, measure])
                .set(value);
        }
        let (margin, se) = pair.margin(self.config.min);
        if pair.samples.len() >= MIN_SAMPLES {
            let on = if pair.pool_on {
                margin + Z * se >= 0.0
            } else {
                margin - Z * se > 0.0
            };
            if on != pair.pool_on {
                let n = pair.samples.len();
                let (min, overlap) = (self.config.min, means.pooled.top_k_overlap);
                let reversed = means.reversed.top_k_overlap;
                if on {
                    tracing::info!(
                        model,
                        setting,
                        relative,
                        overlap,
                        reversed,
                        margin,
                        se,
                        n,
                        min,
                        "quality guard: pooled rankings agree with user-first again; item pool back on"
                    );
                } else {
                    tracing::warn!(
                        model,
                        setting,
                        relative,
                        overlap,
                        reversed,
                        margin,
                        se,
                        n,
                        min,
                        "quality guard: pooled rankings agree with user-first less than reordered user-first does (top-10 overlap below --rank-quality-min times the reversed one, by more than 2 standard errors); item pool off for this model and setting"
                    );
                }
                pair.pool_on = on;
                // A fresh window: the next verdict rests on samples of the new direction only.
                pair.samples.clear();
            }
        }
        m.pool_on
            .with_label_values(&[model, setting])
            .set(i64::from(pair.pool_on));
    }

    /// `/ready`'s `quality` detail: per model and setting, the window's means and the verdict.
    pub fn detail(&self) -> Value {
        let pairs = self.lock();
        let mut out: Vec<Value> = (pairs.iter())
            .map(|((model, setting), p)| {
                let m = p.means();
                let (margin, se) = p.margin(self.config.min);
                let has = !p.samples.is_empty();
                json!({"model": model, "setting": setting, "pool": if p.pool_on {"on"} else {"off"},
                       "samples": p.samples.len(),
                       "relative": m.map(|m| m.relative()),
                       "top10_overlap": m.map(|m| m.pooled.top_k_overlap),
                       "spearman": m.map(|m| m.pooled.spearman),
                       "reversed_top10_overlap": m.map(|m| m.reversed.top_k_overlap),
                       "reversed_spearman": m.map(|m| m.reversed.spearman),
                       "margin": has.then_some(margin), "margin_se": has.then_some(se)})
            })
            .collect();
        out.sort_by_key(|v| (v["model"].to_string(), v["setting"].to_string()));
        json!({"sample": self.config.sample, "min": self.config.min, "pairs": out})
    }
}

/// A shadow scoring's place among the [`MAX_IN_FLIGHT`]; freed on drop.
pub struct Slot(Arc<QualityGuard>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests;
