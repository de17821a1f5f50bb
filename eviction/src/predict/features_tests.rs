//! Unit tests of `features`.

use super::*;

/// Labels in window order, from access times alone: a row is labelled at its block's
/// next access, or censored once the horizon passed without one (an access at the same
/// time as the row's counts as the next).
fn reference_labels(events: &[(u64, BlockId)], horizon: u64) -> Vec<(BlockId, u64)> {
    let mut pending = std::collections::HashMap::new();
    let mut order = VecDeque::new();
    let mut out = Vec::new();
    for &(t, b) in events {
        if let Some(t0) = pending.remove(&b) {
            out.push((b, t - t0));
        }
        while let Some(&(t0, b0)) = order.front() {
            if t0 + horizon > t {
                break;
            }
            order.pop_front();
            if pending.get(&b0) == Some(&t0) {
                pending.remove(&b0);
                out.push((b0, horizon));
            }
        }
        pending.insert(b, t);
        order.push_back((t, b));
    }
    out
}

#[test]
fn labels_and_censoring_follow_access_times() {
    let mut x = 11u64;
    for horizon in [0, 1, 3, 20] {
        // Several accesses per time step, repeats of a block within one step included.
        let mut events = Vec::new();
        for t in 0..3_000u64 {
            for _ in 0..3 {
                x = crate::hash::mix64(x);
                events.push((t, 1 + x % 40));
            }
        }
        let mut f = Features::new(FeatureConfig {
            horizon,
            window_rows: usize::MAX,
            ..FeatureConfig::default()
        });
        for &(time, block) in &events {
            // The depth column carries the block id, to tell rows apart.
            let ctx = crate::policy::RequestCtx::default();
            let depth = block as u32;
            f.observe(&AccessEvent {
                block,
                depth,
                time,
                ctx,
            });
        }
        let got: Vec<(BlockId, f32)> = f
            .window
            .iter()
            .map(|(row, y)| (row[DELTAS + COUNTERS] as BlockId, *y))
            .collect();
        let want: Vec<(BlockId, f32)> = reference_labels(&events, horizon)
            .into_iter()
            .map(|(b, d)| (b, (d.min(horizon) as f32).ln_1p()))
            .collect();
        assert_eq!(got, want, "horizon {horizon}");
    }
}

#[test]
fn tabulated_decay_is_bit_identical_to_computed() {
    let table = DecayTable::default();
    for gap in (0..TABLE_GAPS as u64 + 10).chain([100_000, u64::from(u32::MAX)]) {
        let computed: [f32; COUNTERS] = std::array::from_fn(|i| decay_factor(gap as f32, i));
        assert_eq!(
            table.factors(gap).map(f32::to_bits),
            computed.map(f32::to_bits),
            "gap {gap}"
        );
    }
}
