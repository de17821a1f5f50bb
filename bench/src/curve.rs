//! `recache bench recompute-curve`: ranking quality, throughput and computed tokens against the
//! link-token count K of `--rank-pool-recompute`, drawn from runs already made. It reads the
//! rows `bench quality --json` and `bench gr --json` print (JSON lines, or any JSON document
//! that holds such rows anywhere, as docs/data keeps them), groups bat-pool's rows by setting
//! (`none` is K = 0, `link:k=N` is K = N; other settings are listed as skipped), takes the
//! median over seeds or rounds, and prints one JSON row per K plus UP's reference row; `--out`
//! draws the PNG. It measures nothing itself: every point is a row of the files named.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::error::BenchError;
use crate::plot::{self, Lines, Panel, Series, SeriesLabelPosition, XAxis};
use crate::stats::Spread;

#[derive(clap::Args, Debug)]
pub struct CurveArgs {
    /// Files holding `bench quality` and `bench gr` rows (JSON lines or JSON documents)
    #[arg(long = "from", required = true, num_args = 1..)]
    pub from: Vec<PathBuf>,
    /// Where to draw the PNG (Recall@10 and NDCG@10, rps, computed tokens per request vs K)
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// One point of the curve: a layout at one K, medians over the rows found.
#[derive(Debug, Default, Serialize)]
pub struct Point {
    pub layout: String,
    /// `None` for UP (no pool: no K).
    pub k: Option<u32>,
    pub recall_at_10: Spread,
    pub ndcg_at_10: Spread,
    pub computed_per_request: Spread,
    /// Share of quality requests bat served user-first (`user_prefix` / `requests`): at a K
    /// where the pool saves nothing, bat-pool's rows are UP's.
    pub user_first_share: Spread,
    /// Saturation throughput (`bench gr` rows).
    pub rps: Spread,
    pub quality_runs: usize,
    pub throughput_runs: usize,
}

#[derive(Default)]
struct Samples {
    recall: Vec<f64>,
    ndcg: Vec<f64>,
    computed: Vec<f64>,
    user_first: Vec<f64>,
    rps: Vec<f64>,
}

/// Rows grouped by (layout, K); settings that are not K-shaped, by name.
#[derive(Default)]
pub struct Collected {
    groups: BTreeMap<(String, Option<u32>), Samples>,
    pub skipped: BTreeMap<String, usize>,
}

/// K of a recompute setting: `none` is 0, `link:k=N` is N; anything else has none.
fn k_of(setting: &str) -> Option<u32> {
    match setting {
        "none" => Some(0),
        s => s.strip_prefix("link:k=")?.parse().ok(),
    }
}

impl Collected {
    /// Walks `v`, taking every object shaped like a quality or a gr row.
    pub fn walk(&mut self, v: &Value) {
        match v {
            Value::Array(items) => items.iter().for_each(|i| self.walk(i)),
            Value::Object(o) => {
                let num = |key: &str| o.get(key).and_then(Value::as_f64);
                let summary = o.get("summary").and_then(Value::as_bool) == Some(true);
                let layout = (o.get("layout").or(o.get("mode"))).and_then(Value::as_str);
                let recall = num("recall_at_10");
                let rps = num("rps").filter(|_| !summary && o.contains_key("mode"));
                match (layout, recall.is_some() || rps.is_some()) {
                    (Some(layout @ ("up" | "bat-pool")), true) => {
                        let setting =
                            (o.get("pool_recompute").and_then(Value::as_str)).unwrap_or("none");
                        let k = if layout == "up" { None } else { k_of(setting) };
                        if layout == "bat-pool" && k.is_none() {
                            *self.skipped.entry(setting.to_string()).or_default() += 1;
                            return;
                        }
                        let s = self.groups.entry((layout.to_string(), k)).or_default();
                        if let Some(r) = recall {
                            s.recall.push(r);
                            s.ndcg.extend(num("ndcg_at_10"));
                            if let Some(n) = num("requests").filter(|&n| n > 0.0) {
                                s.computed.extend(num("computed_tokens").map(|c| c / n));
                                s.user_first.extend(num("user_prefix").map(|u| u / n));
                            }
                        }
                        s.rps.extend(rps);
                    }
                    _ => o.values().for_each(|i| self.walk(i)),
                }
            }
            _ => {}
        }
    }

    pub fn points(&self) -> Vec<Point> {
        (self.groups.iter())
            .map(|((layout, k), s)| Point {
                layout: layout.clone(),
                k: *k,
                recall_at_10: Spread::of(s.recall.iter().copied()),
                ndcg_at_10: Spread::of(s.ndcg.iter().copied()),
                computed_per_request: Spread::of(s.computed.iter().copied()),
                user_first_share: Spread::of(s.user_first.iter().copied()),
                rps: Spread::of(s.rps.iter().copied()),
                quality_runs: s.recall.len(),
                throughput_runs: s.rps.len(),
            })
            .collect()
    }
}

/// Reads every value of `text`: one JSON document or JSON lines.
fn values(text: &str) -> Result<Vec<Value>, serde_json::Error> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .collect()
}

pub async fn run(args: CurveArgs) -> Result<(), BenchError> {
    let mut all = Collected::default();
    for path in &args.from {
        let what = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(BenchError::io(what.clone()))?;
        let vals = values(&text).map_err(|e| BenchError::Setup(format!("{what}: {e}")))?;
        vals.iter().for_each(|v| all.walk(v));
    }
    let points = all.points();
    if !points.iter().any(|p| p.layout == "bat-pool") {
        return Err(BenchError::Setup(
            "no bat-pool rows (bench quality or bench gr --json) in the files named by --from"
                .into(),
        ));
    }
    for p in &points {
        println!("{}", serde_json::to_string(p).unwrap_or_default());
    }
    if !all.skipped.is_empty() {
        let skipped = serde_json::json!({ "skipped_settings": all.skipped });
        println!("{skipped}");
    }
    if let Some(out) = &args.out {
        draw(out, &points)
            .map_err(|msg| BenchError::Setup(format!("--out {}: {msg}", out.display())))?;
        eprintln!("wrote {}", out.display());
    }
    Ok(())
}

/// bat-pool's points against K (with their min–max), UP drawn flat across the same K.
fn draw(path: &std::path::Path, points: &[Point]) -> Result<(), String> {
    let pooled: Vec<&Point> = points.iter().filter(|p| p.k.is_some()).collect();
    let up = points.iter().find(|p| p.layout == "up");
    let ks: Vec<f64> = pooled.iter().filter_map(|p| p.k).map(f64::from).collect();
    let series = |name: &str, f: fn(&Point) -> Spread| {
        let mut s = Series::new(
            name,
            (pooled.iter().zip(&ks))
                .map(|(p, &k)| (k, f(p).median))
                .filter(|xy| xy.1.is_finite())
                .collect(),
        );
        s.spread = (pooled.iter().zip(&ks))
            .map(|(p, &k)| (k, f(p).min, f(p).max))
            .filter(|s| s.1.is_finite())
            .collect();
        s
    };
    // No UP rows (or no such number for UP): the reference line is left out, not drawn at NaN.
    let flat = |name: &str, f: fn(&Point) -> Spread| {
        let y = up.map(|p| f(p).median).filter(|y| y.is_finite());
        let points = y.map(|y| ks.iter().map(|&k| (k, y)).collect());
        Series::new(name, points.unwrap_or_default())
    };
    let lines = |title, y_desc, series| Lines {
        title,
        x_desc: "K (link tokens recomputed per pooled item; 0 = none)",
        y_desc,
        x_axis: XAxis::Span,
        diagonal: false,
        legend: SeriesLabelPosition::LowerRight,
        series,
    };
    // bat-pool's line and UP's reference for one number, named "<layout><what>".
    let both = |what: &str, f: fn(&Point) -> Spread| {
        vec![
            series(&format!("bat-pool{what}"), f),
            flat(&format!("UP{what}"), f),
        ]
    };
    let quality = [
        both(" Recall@10", |p| p.recall_at_10),
        both(" NDCG@10", |p| p.ndcg_at_10),
    ]
    .concat();
    let panels = [
        Panel::Lines(lines("ranking quality (held-out users)", "", quality)),
        Panel::Lines(lines(
            "saturation throughput",
            "requests/s",
            both("", |p| p.rps),
        )),
        Panel::Lines(lines(
            "tokens the engine computes per ranking",
            "tokens",
            both("", |p| p.computed_per_request),
        )),
    ];
    plot::draw(path, (1500, 480), &panels)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_anywhere_are_grouped_by_layout_and_k() {
        let text = r#"{"runs": {"1": [
              {"layout": "up", "recall_at_10": 0.2, "ndcg_at_10": 0.1, "computed_tokens": 240, "requests": 1},
              {"layout": "bat-pool", "recall_at_10": 0.3, "ndcg_at_10": 0.2, "computed_tokens": 40, "requests": 1, "pool_recompute": "none"},
              {"layout": "popularity", "recall_at_10": 0.05}]}}
            {"layout": "bat-pool", "recall_at_10": 0.1, "ndcg_at_10": 0.05, "computed_tokens": 300, "requests": 2, "user_prefix": 1, "pool_recompute": "link:k=2"}
            {"mode": "bat-pool", "rps": 1.5, "pool_recompute": "link:k=2"}
            {"mode": "bat-pool", "rps": {"median": 9.0}, "summary": true, "pool_recompute": "link:k=2"}
            {"layout": "bat-pool", "recall_at_10": 0.1, "pool_recompute": "blend:ratio=0.1"}"#;
        let mut c = Collected::default();
        values(text).expect("json").iter().for_each(|v| c.walk(v));
        let p = c.points();
        let at = |layout: &str, k| p.iter().find(|p| p.layout == layout && p.k == k);
        let up = at("up", None).expect("up");
        assert_eq!(
            (up.recall_at_10.median, up.computed_per_request.median),
            (0.2, 240.0)
        );
        let k0 = at("bat-pool", Some(0)).expect("k=0");
        assert_eq!(k0.ndcg_at_10.median, 0.2);
        let k2 = at("bat-pool", Some(2)).expect("k=2");
        assert_eq!(
            (k2.computed_per_request.median, k2.rps.median),
            (150.0, 1.5)
        );
        assert_eq!(
            (k2.quality_runs, k2.throughput_runs),
            (1, 1),
            "summary rows left out"
        );
        assert_eq!(p.len(), 3, "popularity is not a curve layout");
        assert_eq!(c.skipped.get("blend:ratio=0.1"), Some(&1));
    }

    #[test]
    fn k_comes_from_link_settings_only() {
        assert_eq!(k_of("none"), Some(0));
        assert_eq!(k_of("link:k=3"), Some(3));
        assert_eq!(k_of("blend:ratio=0.2"), None);
        assert_eq!(k_of("link:k=x"), None);
    }
}
