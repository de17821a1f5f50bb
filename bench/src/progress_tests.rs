//! Unit tests of `progress`.

use super::*;

#[test]
fn lines_say_time_taken_and_left() {
    assert_eq!(
        timing(Duration::from_secs(100), 400, 4000),
        "1m 40s, ~15m 00s left"
    );
    assert_eq!(timing(Duration::from_secs(5), 10, 10), "5s");
    assert_eq!(timing(Duration::from_secs(0), 0, 10), "0s");
    assert_eq!(
        timing(Duration::from_secs(1800), 1, 3),
        "30m 00s, ~1h 00m left"
    );
}

#[test]
fn a_hidden_bar_keeps_time_for_the_lines() {
    // Plain lines read the time from the bar, which is hidden off a terminal.
    let bar = ProgressBar::hidden();
    std::thread::sleep(Duration::from_millis(20));
    assert!(bar.elapsed() >= Duration::from_millis(20));
}
