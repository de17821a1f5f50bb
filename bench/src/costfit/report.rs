//! `bench costfit`'s output: one JSON row per measured request ([`Row`]), the fits over them
//! ([`Fits`]: all kinds, each kind alone, and one `b` per kind with `a`, `c` shared) as JSON
//! rows next to the FLOP ratio, and the `--out` PNG (measured prefill time against each fit's
//! prediction, per kind).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::args::Kind;
use super::fit::{self, Abc, Point};
use super::probe::Delta;
use crate::error::BenchError;
use crate::plot::{self, Lines, Panel, SeriesLabelPosition, XAxis};

/// Who measured: the testbed model kind and the served name, on every row.
#[derive(Debug, Clone)]
pub struct Model {
    pub kind: String,
    pub served: String,
}

/// One measured request.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub model: String,
    pub served_model: String,
    pub kind: &'static str,
    pub round: usize,
    /// The request's place among its kind's in a round: the same point in every round.
    pub point: usize,
    pub prompt_tokens: u64,
    /// Tokens already in KV when the computed ones ran: cached plus loaded by the connector.
    pub prefix_tokens: u64,
    pub computed_tokens: u64,
    pub local_hit_tokens: u64,
    pub pool_hit_tokens: u64,
    pub pairs: u64,
    /// vLLM's own prefill time of the request (its prefill histogram's sum, delta).
    pub prefill_s: f64,
    /// Prefills vLLM observed during the request; a row with another count than 1 (another
    /// request ran too) is left out of the fits.
    pub prefills: u64,
    /// What the bench sent, for the fresh and cached kinds: the prefix it cached first and the
    /// new tokens after it (null for pooled requests, whose split the engine decides).
    pub planned_prefix_tokens: Option<u64>,
    pub planned_new_tokens: Option<u64>,
}

impl Row {
    /// Row of request `point` of `kind` in round `round`.
    pub fn new(
        model: &Model,
        kind: Kind,
        (round, point): (usize, usize),
        d: &Delta,
        planned: Option<(u64, u64)>,
    ) -> Self {
        Self {
            model: model.kind.clone(),
            served_model: model.served.clone(),
            kind: kind.name(),
            round,
            point,
            prompt_tokens: d.prompt_tokens,
            prefix_tokens: d.prefix(),
            computed_tokens: d.computed,
            local_hit_tokens: d.local_hits,
            pool_hit_tokens: d.external_hits,
            pairs: fit::pairs(d.prefix(), d.computed),
            prefill_s: d.prefill_s,
            prefills: d.prefills,
            planned_prefix_tokens: planned.map(|p| p.0),
            planned_new_tokens: planned.map(|p| p.1),
        }
    }

    fn point(&self) -> Point {
        Point {
            tokens: self.computed_tokens as f64,
            pairs: self.pairs as f64,
            seconds: self.prefill_s,
        }
    }

    fn clean(&self) -> bool {
        self.prefills == 1
    }
}

/// The kinds present in `rows`, in [`Kind::ALL`]'s order, with one point per request of a
/// round: of a point's clean rows over the rounds, the one of median time (the lower middle
/// of an even count), so a round the machine slowed does not pull the fit.
fn by_kind(rows: &[Row]) -> Vec<(Kind, Vec<Point>)> {
    Kind::ALL
        .iter()
        .map(|&k| {
            let mut points: BTreeMap<usize, Vec<&Row>> = BTreeMap::new();
            for r in rows.iter().filter(|r| r.kind == k.name() && r.clean()) {
                points.entry(r.point).or_default().push(r);
            }
            let pts = (points.into_values())
                .map(|mut rs| {
                    rs.sort_by(|a, b| a.prefill_s.total_cmp(&b.prefill_s));
                    rs[(rs.len() - 1) / 2].point()
                })
                .collect();
            (k, pts)
        })
        .filter(|(_, p): &(Kind, Vec<Point>)| !p.is_empty())
        .collect()
}

/// Every fit of one run.
pub struct Fits {
    kinds: Vec<(Kind, Vec<Point>)>,
    all: Option<(Abc, f64)>,
    own: Vec<Option<(Abc, f64)>>,
    /// (a, c, b per kind of `kinds`, R²)
    shared: Option<(f64, f64, Vec<f64>, f64)>,
}

impl Fits {
    pub fn of(rows: &[Row]) -> Self {
        let kinds = by_kind(rows);
        let all_pts: Vec<Point> = kinds.iter().flat_map(|k| k.1.iter().copied()).collect();
        let index: Vec<usize> = (kinds.iter().enumerate())
            .flat_map(|(i, k)| std::iter::repeat_n(i, k.1.len()))
            .collect();
        Self {
            all: fit::fit_abc(&all_pts),
            own: kinds.iter().map(|k| fit::fit_abc(&k.1)).collect(),
            shared: (kinds.len() > 1)
                .then(|| fit::fit_per_kind_b(&all_pts, &index, kinds.len()))
                .flatten(),
            kinds,
        }
    }

    /// The fit rows: `all`, each kind, `shared_a_c`. `pooled_load_s`: the connector's seconds
    /// loading pooled K/V over the pooled requests, next to their prefill seconds.
    pub fn json(
        &self,
        model: &Model,
        flop_ratio: Option<f64>,
        pooled_load_s: Option<f64>,
    ) -> Vec<Value> {
        let base = || {
            let mut m = Map::new();
            m.insert("model".into(), json!(model.kind));
            m.insert("served_model".into(), json!(model.served));
            m.insert("flop_ratio".into(), json!(flop_ratio));
            m
        };
        let abc_row = |name: &str, fitted: &Option<(Abc, f64)>, kinds: &[&(Kind, Vec<Point>)]| {
            let mut m = base();
            m.insert("fit".into(), json!(name));
            let n: usize = kinds.iter().map(|k| k.1.len()).sum();
            m.insert("points".into(), json!(n));
            let Some((abc, r2)) = fitted else {
                m.insert(
                    "error".into(),
                    json!("too few points: a, b and c need at least 4 with distinct lengths"),
                );
                return Value::Object(m);
            };
            m.insert("a_s_per_token".into(), json!(abc.a));
            m.insert("b_s_per_pair".into(), json!(abc.b));
            m.insert("c_s".into(), json!(abc.c));
            m.insert("b_over_a".into(), json!(abc.b / abc.a));
            m.insert(
                "b_over_a_vs_flops".into(),
                json!(flop_ratio.map(|f| abc.b / abc.a / f)),
            );
            m.insert("r2".into(), json!(r2));
            let rel: Map<String, Value> = (kinds.iter())
                .map(|k| {
                    (
                        k.0.name().to_string(),
                        json!(fit::mean_relative_residual(abc, &k.1)),
                    )
                })
                .collect();
            m.insert("mean_rel_residual".into(), Value::Object(rel));
            Value::Object(m)
        };
        let every: Vec<&(Kind, Vec<Point>)> = self.kinds.iter().collect();
        let mut out = vec![abc_row("all", &self.all, &every)];
        for (k, own) in self.kinds.iter().zip(&self.own) {
            let mut row = abc_row(k.0.name(), own, &[k]);
            if k.0 == Kind::Pooled
                && let (Some(load), Value::Object(m)) = (pooled_load_s, &mut row)
            {
                let prefill: f64 = k.1.iter().map(|p| p.seconds).sum();
                m.insert("connector_load_s".into(), json!(load));
                m.insert("prefill_s".into(), json!(prefill));
                m.insert("connector_load_share".into(), json!(load / prefill));
            }
            out.push(row);
        }
        if let Some((a, c, bs, r2)) = &self.shared {
            let per = |f: &dyn Fn(f64) -> f64| -> Value {
                let m: Map<String, Value> = (self.kinds.iter().zip(bs))
                    .map(|(k, b)| (k.0.name().to_string(), json!(f(*b))))
                    .collect();
                Value::Object(m)
            };
            let fresh_b =
                (self.kinds.iter().zip(bs)).find_map(|(k, b)| (k.0 == Kind::Fresh).then_some(*b));
            let mut m = base();
            m.insert("fit".into(), json!("shared_a_c"));
            m.insert(
                "points".into(),
                json!(every.iter().map(|k| k.1.len()).sum::<usize>()),
            );
            m.insert("a_s_per_token".into(), json!(a));
            m.insert("c_s".into(), json!(c));
            m.insert("b_s_per_pair".into(), per(&|b| b));
            m.insert("b_over_a".into(), per(&|b| b / a));
            m.insert(
                "b_vs_fresh".into(),
                match fresh_b {
                    Some(f) => per(&|b| b / f),
                    None => Value::Null,
                },
            );
            m.insert("r2".into(), json!(r2));
            out.push(Value::Object(m));
        }
        out
    }

    /// The PNG: measured against predicted, by the fit over all kinds and by each kind's own.
    pub fn plot(&self, path: &Path, model: &Model) -> Result<(), BenchError> {
        let series = |predict: &dyn Fn(usize, &Point) -> Option<f64>| {
            (self.kinds.iter().enumerate())
                .map(|(i, (k, pts))| {
                    let xy = (pts.iter())
                        .filter_map(|p| Some((predict(i, p)? * 1e3, p.seconds * 1e3)))
                        .collect();
                    plot::Series::new(k.name(), xy)
                })
                .collect::<Vec<_>>()
        };
        let all = self.all.map(|f| f.0);
        let title_all = format!(
            "{}: measured vs one fit (a·tokens + b·pairs + c)",
            model.kind
        );
        let title_own = format!("{}: measured vs each kind's own fit", model.kind);
        let panel = |title, series| {
            Panel::Scatter(Lines {
                title,
                x_desc: "predicted prefill (ms)",
                y_desc: "vLLM prefill time (ms)",
                x_axis: XAxis::FromZero,
                diagonal: true,
                legend: SeriesLabelPosition::UpperLeft,
                series,
            })
        };
        let panels = [
            panel(&title_all, series(&|_, p| all.map(|f| f.predict(p)))),
            panel(
                &title_own,
                series(&|i, p| self.own[i].map(|f| f.0.predict(p))),
            ),
        ];
        plot::draw(path, (1600, 700), &panels)
            .map_err(|e| BenchError::Setup(format!("drawing {}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: Kind, prefix: u64, computed: u64, seconds: f64) -> Row {
        let d = Delta {
            prefill_s: seconds,
            prefills: 1,
            prompt_tokens: prefix + computed,
            computed,
            local_hits: if kind == Kind::Cached { prefix } else { 0 },
            external_hits: if kind == Kind::Pooled { prefix } else { 0 },
        };
        let model = Model {
            kind: "tiny".into(),
            served: "tiny-qwen2".into(),
        };
        let planned = (kind != Kind::Pooled).then_some((prefix, computed));
        Row::new(&model, kind, (0, 0), &d, planned)
    }

    /// Rows from known coefficients: pooled pairs cost twice a fresh pair.
    fn rows() -> Vec<Row> {
        let t = |pre: u64, n: u64, b: f64| 1e-4 * n as f64 + b * fit::pairs(pre, n) as f64 + 0.01;
        let mut out = Vec::new();
        for n in [256, 1024, 2048, 4096, 7168] {
            out.push(row(Kind::Fresh, 0, n, t(0, n, 1e-8)));
        }
        for (pre, n) in [(512, 64), (2048, 1024), (4096, 256), (4096, 2048)] {
            out.push(row(Kind::Cached, pre, n, t(pre, n, 1e-8)));
        }
        for (pre, n) in [(1900, 1100), (1881, 3000), (1919, 5000), (1900, 2200)] {
            out.push(row(Kind::Pooled, pre, n, t(pre, n, 2e-8)));
        }
        for (i, r) in out.iter_mut().enumerate() {
            r.point = i;
        }
        out
    }

    #[test]
    fn each_point_is_fitted_at_its_median_round() {
        let mut rows = rows();
        let base = rows.clone();
        // Round 1 is the same but 10% slower, round 2 a machine hiccup (3x) on every point:
        // the median round (the clean one's and the 10% one's lower middle) is round 0's.
        for (round, factor) in [(1, 1.1), (2, 3.0)] {
            rows.extend(base.iter().map(|r| Row {
                round,
                prefill_s: r.prefill_s * factor,
                ..r.clone()
            }));
        }
        let model = Model {
            kind: "tiny".into(),
            served: "s".into(),
        };
        let fits = Fits::of(&rows).json(&model, None, None);
        let fresh = fits.iter().find(|f| f["fit"] == "fresh").expect("fresh");
        assert_eq!(fresh["points"], json!(5));
        let b = fresh["b_s_per_pair"].as_f64().unwrap_or(f64::NAN);
        assert!((b - 1.1e-8).abs() < 1e-13, "{fresh}");
    }

    #[test]
    fn rows_and_fits_have_the_documented_shape() {
        let rows = rows();
        let v = serde_json::to_value(&rows[5]).expect("row");
        for k in [
            "model",
            "served_model",
            "kind",
            "prompt_tokens",
            "prefix_tokens",
            "computed_tokens",
            "pairs",
            "prefill_s",
            "prefills",
        ] {
            assert!(v.get(k).is_some(), "{k} missing in {v}");
        }
        assert_eq!(
            (v["kind"].as_str(), v["model"].as_str()),
            (Some("cached"), Some("tiny"))
        );
        assert_eq!(v["pairs"], json!(fit::pairs(512, 64)));
        let model = Model {
            kind: "tiny".into(),
            served: "tiny-qwen2".into(),
        };
        let fits = Fits::of(&rows).json(&model, Some(5e-4), Some(0.5));
        let names: Vec<&str> = fits.iter().filter_map(|f| f["fit"].as_str()).collect();
        assert_eq!(names, ["all", "fresh", "cached", "pooled", "shared_a_c"]);
        assert!(fits.iter().all(|f| f["model"] == "tiny"));
        // Each kind alone recovers its own b; the shared fit says pooled pairs cost 2x fresh.
        let b = |i: usize| fits[i]["b_s_per_pair"].as_f64().unwrap_or(f64::NAN);
        assert!((b(1) - 1e-8).abs() < 1e-13 && (b(3) - 2e-8).abs() < 1e-13);
        let vs = fits[4]["b_vs_fresh"]["pooled"].as_f64().unwrap_or(f64::NAN);
        assert!((vs - 2.0).abs() < 1e-6, "{}", fits[4]);
        assert!(fits[3]["connector_load_share"].as_f64().is_some());
        assert!(
            fits[1]["mean_rel_residual"]["fresh"]
                .as_f64()
                .is_some_and(|r| r < 1e-6)
        );
        // The one fit over all kinds misses the pooled points, and says so.
        let miss = fits[0]["mean_rel_residual"]["pooled"]
            .as_f64()
            .unwrap_or(0.0);
        assert!(miss > 0.01, "{}", fits[0]);
    }

    #[test]
    fn unclean_rows_are_left_out_and_too_few_points_say_so() {
        let mut rows = rows();
        rows.truncate(7); // 5 fresh, 2 cached
        rows[6].prefills = 2;
        let model = Model {
            kind: "tiny".into(),
            served: "s".into(),
        };
        let fits = Fits::of(&rows).json(&model, None, None);
        let cached = fits
            .iter()
            .find(|f| f["fit"] == "cached")
            .expect("cached row");
        assert_eq!(cached["points"], json!(1));
        assert!(cached["error"].is_string(), "{cached}");
        assert!(fits[0]["b_over_a_vs_flops"].is_null());
    }
}
