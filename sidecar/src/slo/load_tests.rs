//! Unit tests of `slo::load`.

use super::*;

#[test]
fn a_steady_stream_reads_as_its_rate() {
    let t0 = Instant::now();
    let mut load = OfferedLoad::default();
    // 80 ms of work every 100 ms for a minute: 0.8 of the replica.
    for i in 0..600u64 {
        load.add(t0 + Duration::from_millis(100 * i), 80.0);
    }
    let r = load.ratio(t0 + Duration::from_millis(60_000));
    assert!((r - 0.8).abs() < 0.05, "{r}");
    // It fades when nothing comes: after three horizons, about 5% of it is left.
    let r = load.ratio(t0 + Duration::from_millis(60_000) + 3 * HORIZON);
    assert!(r < 0.05, "{r}");
}

#[test]
fn one_burst_the_replica_can_absorb_is_not_an_overload() {
    let t0 = Instant::now();
    let mut load = OfferedLoad::default();
    // 20 calls of 200 ms at once: 4 s of work, less than the 10 s horizon.
    for _ in 0..20 {
        load.add(t0, 200.0);
    }
    assert!(load.ratio(t0) < 1.0);
    // Three such bursts in a few seconds are.
    for s in 1..3u64 {
        for _ in 0..20 {
            load.add(t0 + Duration::from_secs(s), 200.0);
        }
    }
    assert!(load.ratio(t0 + Duration::from_secs(2)) >= 1.0);
}
