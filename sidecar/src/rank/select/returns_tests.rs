//! Unit tests of `rank::select::returns`.

use super::*;

/// `users` in turn for `rounds` rounds, each visit counted as the hotness window counts it
/// (no one leaves a window this long).
fn rounds(r: &mut Returns, users: &[&str], rounds: u64) {
    for k in 1..=rounds {
        for u in users {
            r.visit(u, k);
        }
    }
}

#[test]
fn no_returns_seen_assumes_none() {
    let mut r = Returns::default();
    assert_eq!(r.share(1, 1000), 0.0);
    assert!(!r.repays(1, 1000, 4000, 1900, false));
    for u in 0..50 {
        r.visit(&format!("once-{u}"), 1);
    }
    assert_eq!(r.rate(1), 0.0);
    assert!(!r.repays(1, 1000, 9000, 1900, false));
    assert!(r.repays(1, 1000, 100, 0, false), "nothing to give up now");
}

/// Four regulars: as soon as they come back, the users still waiting for their next visit
/// do not read as gone; the rate is per request of the time each had.
#[test]
fn regulars_read_as_regulars_while_the_stream_is_young() {
    let mut r = Returns::default();
    rounds(&mut r, &["a", "b", "c", "d"], 2);
    // Bucket 1: 4 returns over 4 requests each; bucket 2: none yet, 0+1+2+3 = 6 requests.
    assert_eq!(r.exposure(1), 16.0);
    assert_eq!(r.exposure(2), 6.0);
    let all = 4.0 / 22.0;
    assert!((r.rate(2) - 4.0 / (6.0 + 4.0 / all)).abs() < 1e-12);
    // A 1,000-request window: back almost surely, so a profile longer than the pooled items
    // goes user-first on the third visit (returns over users who reached 3 said under ½ here: item-first).
    assert!(r.share(3, 1000) > 0.99, "{}", r.share(3, 1000));
    assert!(r.repays(3, 1000, 2000, 1900, false));
    assert!(
        !r.repays(3, 1000, 1900, 1900, false),
        "nothing to gain later"
    );
    // With the pool after the profile, a later visit reuses the items as well: the profile
    // is all it gains over item-first, and all it has to repay.
    assert!(r.repays(3, 1000, 1900, 1900, true));
    assert!(r.repays(3, 1000, 500, 1900, true));
}

/// One-off users with a few returns: the chance is about the share that came back.
#[test]
fn a_few_returns_among_many_one_off_users_stay_a_small_chance() {
    let mut r = Returns::default();
    let window = 100;
    for i in 0..1000u64 {
        let user = format!("u{i}");
        r.visit(&user, 1);
        if i % 20 == 0 {
            r.visit(&user, 2); // one in 20 back at once (rate per request is high)...
        }
        if i >= window {
            r.leave(&format!("u{}", i - window)); // ...the others gone after the window
        }
    }
    let share = r.share(1, window as usize);
    assert!(share > 0.01 && share < 0.15, "{share}");
    assert!(!r.repays(1, window as usize, 4000, 1900, false));
}

#[test]
fn leaving_closes_a_users_time_without_a_return() {
    let mut r = Returns::default();
    r.visit("a", 1);
    r.visit("b", 1);
    r.leave("a");
    r.leave("unknown");
    // a: 1 request at one visit, then gone; b: 1 so far.
    assert_eq!(r.exposure(1), 1.0);
    assert_eq!(r.returned[1], 0);
    r.visit("b", 2);
    assert_eq!(r.returned[1], 1);
    assert_eq!(r.exposure(1), 2.0);
}
