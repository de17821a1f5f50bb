use super::*;

fn guard(sample: f64, min: f64) -> Arc<QualityGuard> {
    let registry = Metrics::new().expect("registry");
    Arc::new(QualityGuard::new(GuardConfig { sample, min }, &registry).expect("guard"))
}

/// A sample whose pooled ranking agrees `relative` times as well as the reversed one (0.4).
fn agree(relative: f64) -> Sample {
    let a = |o: f64| Agreement {
        top_k_overlap: o,
        spearman: o,
    };
    Sample {
        pooled: a(0.4 * relative),
        reversed: a(0.4),
    }
}

#[test]
fn samples_exactly_the_share_asked_for() {
    let g = guard(0.25, 0.5);
    let picked = (0..100)
        .filter(|_| g.sample("m").is_some()) // each slot drops at once
        .count();
    assert_eq!(picked, 25);
    let off = guard(0.0, 0.5);
    assert!((0..100).all(|_| off.sample("m").is_none()));
    let all = guard(1.0, 0.5);
    assert!((0..10).all(|_| all.sample("m").is_some()));
}

#[test]
fn busy_slots_skip_the_sample() {
    let g = guard(1.0, 0.5);
    let held: Vec<Slot> = (0..MAX_IN_FLIGHT).filter_map(|_| g.sample("m")).collect();
    assert_eq!(held.len(), MAX_IN_FLIGHT);
    assert!(g.sample("m").is_none(), "no slot left");
    drop(held);
    assert!(g.sample("m").is_some(), "slots come back on drop");
    let skipped = g.metrics.samples.with_label_values(&["m", "skipped"]).get();
    assert_eq!(skipped, 1);
}

#[test]
fn pool_turns_off_below_min_and_back_on_when_it_recovers() {
    let g = guard(1.0, 0.5);
    assert!(g.pool_allowed("m", "none"), "allowed until measured");
    for _ in 0..MIN_SAMPLES - 1 {
        g.record("m", "none", agree(0.1));
    }
    assert!(g.pool_allowed("m", "none"), "no verdict before MIN_SAMPLES");
    g.record("m", "none", agree(0.1));
    assert!(
        !g.pool_allowed("m", "none"),
        "off once the window is below min"
    );
    assert!(
        g.pool_allowed("m", "link:k=1"),
        "another setting is judged on its own"
    );
    assert!(
        g.pool_allowed("other", "none"),
        "another model is judged on its own"
    );
    let d = g.detail();
    assert_eq!(d["pairs"][0]["pool"], "off", "{d}");
    assert_eq!(
        d["pairs"][0]["samples"], 0,
        "a fresh window after the verdict: {d}"
    );
    for _ in 0..MIN_SAMPLES {
        g.record("m", "none", agree(0.9));
    }
    assert!(
        g.pool_allowed("m", "none"),
        "back on once agreement recovers"
    );
}

#[test]
fn the_window_forgets_old_samples() {
    let g = guard(1.0, 0.5);
    for _ in 0..WINDOW {
        g.record("m", "none", agree(0.9));
    }
    for _ in 0..WINDOW {
        g.record("m", "none", agree(0.0));
    }
    assert!(!g.pool_allowed("m", "none"), "{}", g.detail());
}

/// Near-chance overlaps (the testbed ranker's): a window whose ratio of means dips below min
/// by noise keeps the pool; one clearly below turns it off.
#[test]
fn noise_alone_does_not_turn_the_pool_off() {
    let g = guard(1.0, 0.75);
    let s = |pooled: f64, reversed: f64| Sample {
        pooled: Agreement {
            top_k_overlap: pooled,
            spearman: 0.0,
        },
        reversed: Agreement {
            top_k_overlap: reversed,
            spearman: 0.0,
        },
    };
    // Ratio of means 0.06 / 0.1 = 0.6 < 0.75, but the per-sample margins spread widely.
    for i in 0..MIN_SAMPLES {
        let (p, r) = [(0.0, 0.2), (0.2, 0.0), (0.0, 0.0), (0.0, 0.2), (0.1, 0.0)][i % 5];
        g.record("m", "none", s(p, r));
    }
    let d = g.detail();
    assert!(
        d["pairs"][0]["relative"].as_f64().is_some_and(|r| r < 0.75),
        "{d}"
    );
    assert!(g.pool_allowed("m", "none"), "no evidence yet: {d}");
    // Consistently worse: pooled 0.05 against reversed 0.2, every sample.
    for _ in 0..MIN_SAMPLES {
        g.record("m", "none", s(0.05, 0.2));
    }
    assert!(!g.pool_allowed("m", "none"), "{}", g.detail());
}

#[test]
fn a_model_that_never_agrees_with_itself_is_not_judged_by_the_pool() {
    let g = guard(1.0, 0.5);
    let zero = Agreement {
        top_k_overlap: 0.0,
        spearman: 0.0,
    };
    for _ in 0..MIN_SAMPLES {
        g.record(
            "m",
            "none",
            Sample {
                pooled: zero,
                reversed: zero,
            },
        );
    }
    assert!(g.pool_allowed("m", "none"), "{}", g.detail());
    assert_eq!(g.detail()["pairs"][0]["relative"], 1.0);
}
