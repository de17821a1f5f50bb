//! Rows folded over rounds (`--repeat`) per (mode, offered load, memory, workload): the median
//! and the spread of each headline number, and of the mode's throughput over UP's paired
//! round by round (`rps_ratio_vs_up`), as JSON summary rows and a text table (the
//! `--sweep-out` PNG of them is [`super::sweep`]).

use serde::Serialize;

use super::report::ModeResult;
use crate::stats::{self, Spread};

/// One (mode, offered load, memory, workload) over its runs; field names follow
/// [`ModeResult`]'s so scripts read either row kind alike.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub mode: String,
    pub model: String,
    pub workload: String,
    pub offered_rps: f64,
    pub kv_bytes: u64,
    pub runs: usize,
    pub rps: Spread,
    pub p50_ms: Spread,
    pub p99_ms: Spread,
    pub service_p50_ms: Spread,
    pub service_p99_ms: Spread,
    pub hit_rate: Spread,
    pub computed_tokens: Spread,
    /// This mode's rps over UP's at the same offered load and workload, round by round
    /// (`stats::paired_ratio`: median and range of the per-round ratios); None without an
    /// `up` row to pair with.
    pub rps_ratio_vs_up: Option<Spread>,
}

/// (round, rps) of every row of `mode` at `offered_rps` on `workload`.
fn rounds(rows: &[ModeResult], mode: &str, offered_rps: f64, workload: &str) -> Vec<(u64, f64)> {
    (rows.iter())
        .filter(|r| r.mode == mode && r.offered_rps.to_bits() == offered_rps.to_bits())
        .filter(|r| r.workload == workload)
        .map(|r| (r.repeat as u64, r.rps))
        .collect()
}

/// Groups in order of first appearance, so the summary lists modes as they ran.
pub fn summarize(rows: &[ModeResult]) -> Vec<Summary> {
    let key = |r: &ModeResult| {
        (
            r.mode.clone(),
            r.offered_rps.to_bits(),
            r.kv_bytes,
            r.workload.clone(),
        )
    };
    let mut groups: Vec<(_, Vec<&ModeResult>)> = Vec::new();
    for r in rows {
        let k = key(r);
        match groups.iter_mut().find(|g| g.0 == k) {
            Some(g) => g.1.push(r),
            None => groups.push((k, vec![r])),
        }
    }
    groups
        .into_iter()
        .map(|(_, g)| {
            let spread = |f: fn(&ModeResult) -> f64| Spread::of(g.iter().map(|r| f(r)));
            let (offered, workload) = (g[0].offered_rps, g[0].workload.as_str());
            let mine: Vec<(u64, f64)> = g.iter().map(|r| (r.repeat as u64, r.rps)).collect();
            let up = rounds(rows, "up", offered, workload);
            Summary {
                mode: g[0].mode.clone(),
                model: g[0].model.clone(),
                workload: g[0].workload.clone(),
                offered_rps: g[0].offered_rps,
                kv_bytes: g[0].kv_bytes,
                runs: g.len(),
                rps: spread(|r| r.rps),
                p50_ms: spread(|r| r.p50_ms),
                p99_ms: spread(|r| r.p99_ms),
                service_p50_ms: spread(|r| r.service_p50_ms),
                service_p99_ms: spread(|r| r.service_p99_ms),
                hit_rate: spread(|r| r.hit_rate),
                computed_tokens: spread(|r| r.computed_tokens as f64),
                rps_ratio_vs_up: stats::paired_ratio(&mine, &up),
            }
        })
        .collect()
}

/// `": bat-pool 1.84x UP"`: every mode but UP with its ratio to UP (the median over paired
/// rounds), for a chart's title; empty without UP.
pub fn ratios_to_up(summaries: &[Summary]) -> String {
    let said: Vec<String> = (summaries.iter())
        .filter(|s| s.mode != "up")
        .filter_map(|s| Some(format!("{} {:.2}x UP", s.mode, s.rps_ratio_vs_up?.median)))
        .collect();
    match said.is_empty() {
        true => String::new(),
        false => format!(": {}", said.join(", ")),
    }
}

fn cell(s: Spread, decimals: usize) -> String {
    format!(
        "{:.d$} [{:.d$}–{:.d$}]",
        s.median,
        s.min,
        s.max,
        d = decimals
    )
}

/// Fixed-width table, one line per summary: `median [min–max]` per number.
pub fn table_summary(summaries: &[Summary]) -> String {
    let mut s = format!(
        "{:<9} {:>8} {:>4} {:>23} {:>23} {:>23} {:>23} {:>29}\n",
        "mode", "offered", "runs", "rps", "p50_ms", "p99_ms", "hit_rate", "computed_tokens"
    );
    for r in summaries {
        let offered = if r.offered_rps > 0.0 {
            format!("{:.2}", r.offered_rps)
        } else {
            "closed".to_string()
        };
        s += &format!(
            "{:<9} {:>8} {:>4} {:>23} {:>23} {:>23} {:>23} {:>29}\n",
            r.mode,
            offered,
            r.runs,
            cell(r.rps, 3),
            cell(r.p50_ms, 0),
            cell(r.p99_ms, 0),
            cell(r.hit_rate, 3),
            cell(r.computed_tokens, 0),
        );
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn row(mode: &str, offered: f64, rps: f64) -> ModeResult {
        ModeResult {
            mode: mode.into(),
            workload: "default".into(),
            offered_rps: offered,
            rps,
            p50_ms: 10.0 * rps,
            p99_ms: 30.0 * rps,
            hit_rate: rps / 10.0,
            computed_tokens: (rps * 100.0) as u64,
            ..Default::default()
        }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        let odd = Spread::of([3.0, 1.0, 2.0]);
        assert_eq!((odd.median, odd.min, odd.max), (2.0, 1.0, 3.0));
        let even = Spread::of([4.0, 1.0, 3.0, 2.0]);
        assert_eq!((even.median, even.min, even.max), (2.5, 1.0, 4.0));
        assert_eq!(Spread::of([f64::NAN, 5.0]).median, 5.0);
        assert!(Spread::of([]).median.is_nan());
    }

    #[test]
    fn groups_by_mode_and_offered_load() {
        let rows = [
            row("re", 1.0, 1.0),
            row("bat", 1.0, 2.0),
            row("re", 2.0, 1.5),
            row("re", 1.0, 3.0),
            row("bat", 1.0, 4.0),
            row("re", 1.0, 2.0),
        ];
        let s = summarize(&rows);
        let keys: Vec<(&str, f64, usize)> = s
            .iter()
            .map(|s| (s.mode.as_str(), s.offered_rps, s.runs))
            .collect();
        assert_eq!(keys, [("re", 1.0, 3), ("bat", 1.0, 2), ("re", 2.0, 1)]);
        assert_eq!(
            s[0].rps,
            Spread {
                median: 2.0,
                min: 1.0,
                max: 3.0
            }
        );
        assert_eq!(s[1].computed_tokens.median, 300.0);
        assert_eq!(s[0].p99_ms.max, 90.0);
    }

    #[test]
    fn ratios_to_up_pair_rounds_not_medians() {
        let mut rows = Vec::new();
        // UP 2, 3, 2 requests/s; bat-pool 4, 9, 3 (ratios 2, 3, 1.5); round 3 has no UP.
        for (round, up, pool) in [(0, 2.0, 4.0), (1, 3.0, 9.0), (2, 2.0, 3.0)] {
            rows.push(ModeResult {
                repeat: round,
                model: "m".into(),
                ..row("up", 1.0, up)
            });
            rows.push(ModeResult {
                repeat: round,
                model: "m".into(),
                ..row("bat-pool", 1.0, pool)
            });
        }
        rows.push(ModeResult {
            repeat: 3,
            ..row("bat-pool", 1.0, 100.0)
        });
        let s = summarize(&rows);
        let pool = s.iter().find(|s| s.mode == "bat-pool").expect("bat-pool");
        assert_eq!(
            pool.rps_ratio_vs_up,
            Some(Spread {
                median: 2.0,
                min: 1.5,
                max: 3.0
            }),
            "the median of per-round ratios, round 3 unpaired"
        );
        assert_eq!(pool.model, "m");
        let up = s.iter().find(|s| s.mode == "up").expect("up");
        assert_eq!(up.rps_ratio_vs_up.map(|r| r.median), Some(1.0));
        let v = serde_json::to_value(pool).expect("json");
        assert_eq!(
            v["rps_ratio_vs_up"],
            serde_json::json!({"median": 2.0, "min": 1.5, "max": 3.0})
        );
        // No UP at this load: no ratio.
        assert!(
            summarize(&[row("re", 2.0, 1.0)])[0]
                .rps_ratio_vs_up
                .is_none()
        );
        // The --out chart's title.
        let two = [row("up", 50.0, 2.0), row("bat-pool", 50.0, 3.7)];
        assert_eq!(ratios_to_up(&summarize(&two)), ": bat-pool 1.85x UP");
        assert_eq!(ratios_to_up(&summarize(&two[1..])), "", "no UP, no ratio");
    }

    #[test]
    fn table_lists_every_mode() {
        let rows = [
            row("re", 1.0, 1.0),
            row("up", 1.0, 2.0),
            row("bat", 0.0, 3.0),
        ];
        let t = table_summary(&summarize(&rows));
        for m in ["re", "up", "bat", "closed", "2.000 [2.000–2.000]"] {
            assert!(t.contains(m), "{m} missing from\n{t}");
        }
        assert_eq!(t.lines().count(), 4);
    }
}
