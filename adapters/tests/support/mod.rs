//! Waiting for an event in a test: poll a condition until it holds, or fail after a deadline
//! with a message naming what never happened and what was last seen (never a bare sleep: too
//! short on a loaded machine, wasted on an idle one, and silent about why when too short).

#![allow(dead_code)]

use std::fmt::Display;
use std::time::{Duration, Instant};

/// First pause between polls; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(2);
const MAX_PAUSE: Duration = Duration::from_millis(100);

/// Polls `check` until it returns `Ok`, and returns that value; `Err(seen)` means not yet,
/// with what was seen. Panics after `within` with "`what` never happened … last seen: …".
pub async fn wait_for<T, S: Display>(
    what: impl Display,
    within: Duration,
    mut check: impl AsyncFnMut() -> Result<T, S>,
) -> T {
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        let seen = match check().await {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            panic!("{what} never happened within {within:?}; last seen: {seen}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
