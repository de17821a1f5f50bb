//! Unit tests of `bench slo` without an engine: a run's tally (counts, quantiles,
//! attainment), rows over repeats (medians, spread), the goal object, the refusal check and
//! the PNG. The arrival generator's tests live beside it in `arrivals.rs`.

use super::report::goal;
use super::send::{Answer, Sample, is_deadline_refusal};
use super::tally::{Run, Which, summarize, tally, tally_after_warmup};

fn which(mode: &str, load: f64, repeat: usize) -> Which<'_> {
    Which {
        load,
        mode,
        repeat,
        first: true,
        offered_rps: load * 4.0,
        duration_s: 10.0,
        deadline_ms: 100,
    }
}

fn ok(ms: f64) -> Sample {
    Sample {
        latency_ms: ms,
        answer: Answer::Ok,
    }
}

fn rejected() -> Sample {
    Sample {
        latency_ms: 1.0,
        answer: Answer::Rejected,
    }
}

fn error(kind: &str, ms: f64) -> Sample {
    Sample {
        latency_ms: ms,
        answer: Answer::Error(kind.into()),
    }
}

#[test]
fn tally_counts_attainment_and_quantiles() {
    // 100 ok at 1..=100 ms (deadline 100: all on time), 50 late at 200 ms, 40 refused,
    // 10 timeouts at 60 s.
    let mut s: Vec<Sample> = (1..=100).map(|i| ok(i as f64)).collect();
    s.extend((0..50).map(|_| ok(200.0)));
    s.extend((0..40).map(|_| rejected()));
    s.extend((0..10).map(|_| error("timeout", 60_000.0)));
    let r = tally(&which("slo", 2.0, 0), &s);
    assert_eq!(
        (r.offered, r.ok, r.on_time, r.rejected, r.errors),
        (200, 150, 100, 40, 10)
    );
    assert_eq!(r.errors_by_kind.get("timeout"), Some(&10));
    assert_eq!(r.goodput_rps, 10.0);
    assert_eq!(r.throughput_rps, 15.0);
    assert_eq!(r.attainment, 0.5);
    assert_eq!(r.admitted_attainment, 100.0 / 160.0);
    assert_eq!(r.reject_rate, 0.2);
    // Admitted: 160 latencies (refusals left out); the timeouts are the top 10.
    assert_eq!(r.p50_ms, 81.0);
    assert_eq!(r.p99_ms, 60_000.0);
    assert_eq!(r.offered_rps, 8.0);
    assert_eq!(r.arrived_rps, 20.0);
}

#[test]
fn tally_of_nothing_and_of_only_refusals() {
    let r = tally(&which("plain", 0.5, 0), &[]);
    assert_eq!(r.offered, 0);
    assert!(r.attainment.is_nan() && r.p99_ms.is_nan());
    let r = tally(&which("slo", 0.5, 0), &[rejected(), rejected()]);
    assert_eq!(r.reject_rate, 1.0);
    assert!(r.admitted_attainment.is_nan() && r.p50_ms.is_nan());
    let v = serde_json::to_value(&r).unwrap_or_default();
    assert!(v["p50_ms"].is_null(), "NaN must serialize as null: {v}");
}

#[test]
fn warmup_requests_are_counted_apart_and_only_with_a_warmup() {
    // Arrivals at 0..10 s; the first 4 s are warm-up: 2 late and 2 refused there, 6 on time
    // in the measured window.
    let times: Vec<f64> = (0..10).map(f64::from).collect();
    let mut s = vec![ok(500.0), ok(500.0), rejected(), rejected()];
    s.extend((0..6).map(|_| ok(50.0)));
    let r = tally_after_warmup(&which("slo", 2.0, 0), &times, &s, 4.0);
    assert_eq!((r.offered, r.on_time, r.rejected), (6, 6, 0));
    assert_eq!(r.admitted_attainment, 1.0);
    let w = r.warmup.clone().expect("a warm-up part");
    assert_eq!((w.offered, w.ok, w.on_time, w.rejected), (4, 2, 0, 2));
    assert_eq!(w.admitted_attainment, 0.0);
    let v = serde_json::to_value(&r).unwrap_or_default();
    assert_eq!(v["warmup"]["offered"], 4);
    // Without a warm-up every request counts and the field is left out.
    let r = tally_after_warmup(&which("slo", 2.0, 0), &times, &s, 0.0);
    assert_eq!((r.offered, r.rejected), (10, 2));
    let v = serde_json::to_value(&r).unwrap_or_default();
    assert!(v.get("warmup").is_none(), "{v}");
}

fn run_with(mode: &str, load: f64, repeat: usize, on_time: usize, rejected_n: usize) -> Run {
    let mut s: Vec<Sample> = (0..on_time).map(|_| ok(50.0)).collect();
    s.extend((0..rejected_n).map(|_| rejected()));
    s.extend((0..(20 - on_time - rejected_n)).map(|_| ok(500.0)));
    tally(&which(mode, load, repeat), &s)
}

#[test]
fn rows_take_medians_and_spread_over_repeats() {
    let runs = vec![
        run_with("plain", 2.0, 0, 4, 0),
        run_with("slo", 2.0, 0, 12, 6),
        run_with("plain", 2.0, 1, 2, 0),
        run_with("slo", 2.0, 1, 14, 4),
        run_with("plain", 2.0, 2, 6, 0),
        run_with("slo", 2.0, 2, 10, 8),
    ];
    let rows = summarize(&runs);
    assert_eq!(rows.len(), 2);
    let (p, s) = (&rows[0], &rows[1]);
    assert_eq!(
        (p.mode.as_str(), s.mode.as_str(), p.runs),
        ("plain", "slo", 3)
    );
    assert_eq!(p.goodput_rps, 0.4);
    assert_eq!(s.goodput_rps, 1.2);
    assert_eq!(s.rejected, 6.0);
    assert_eq!(s.on_time, 12.0);
    let g = s.spread["goodput_rps"];
    assert_eq!((g.min, g.max), (1.0, 1.4));
    let a = p.spread["attainment"];
    assert_eq!((a.min, a.max), (0.1, 0.3));
    // An even count of repeats: the mean of the middle two.
    let rows = summarize(&runs[..4]);
    assert!((rows[0].goodput_rps - 0.3).abs() < 1e-12);
}

#[test]
fn goal_is_computed_and_null_without_its_loads() {
    let runs = vec![
        run_with("plain", 2.0, 0, 4, 0),
        run_with("slo", 2.0, 0, 12, 6),
        run_with("plain", 1.0, 0, 20, 0),
        run_with("slo", 1.0, 0, 20, 0),
    ];
    let g = goal(&summarize(&runs));
    assert!(g["at_0_5x"].is_null(), "{g}");
    let ratio = g["at_2x"]["goodput_ratio"].as_f64().unwrap_or(0.0);
    assert!((ratio - 3.0).abs() < 1e-9, "{g}");
    // 12 on time of 14 admitted: 0.857 < 0.9, so the goal is missed despite the ratio.
    assert_eq!(g["at_2x"]["met"], false, "{g}");
    let runs = vec![
        run_with("plain", 0.5, 0, 20, 0),
        run_with("slo", 0.5, 0, 20, 0),
    ];
    let g = goal(&summarize(&runs));
    assert!(g["at_2x"].is_null());
    assert_eq!(g["at_0_5x"]["throughput_cost"], 0.0);
    assert_eq!(g["at_0_5x"]["met"], true);
}

#[test]
fn only_deadline_refusals_count_as_rejected() {
    let body = br#"{"error": {"type": "deadline_unreachable", "message": "late"}}"#;
    assert!(is_deadline_refusal(body));
    let coded = br#"{"error": {"type": "rate_limit_error", "code": "deadline_unreachable"}}"#;
    assert!(is_deadline_refusal(coded));
    let limit = br#"{"error": {"type": "rate_limit_error", "code": "too_many_requests"}}"#;
    assert!(!is_deadline_refusal(limit));
    assert!(!is_deadline_refusal(b"not json"));
}

#[test]
fn png_draws() {
    let runs = vec![
        run_with("plain", 0.5, 0, 20, 0),
        run_with("slo", 0.5, 0, 19, 1),
        run_with("plain", 2.0, 0, 4, 0),
        run_with("slo", 2.0, 0, 12, 6),
    ];
    // No font is a failure, not a pass: tests/prereqs installs one.
    if let Err(e) = crate::plot::register_font() {
        panic!("the PNG cannot be checked: {e}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("slo.png");
    let drawn = super::plot::plot(&path, &summarize(&runs));
    assert!(drawn.is_ok(), "{drawn:?}");
    assert!(std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) > 1000);
}
