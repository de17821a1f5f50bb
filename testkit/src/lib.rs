//! Waiting for an event in a test, for every test tree of the workspace (the adapters', the
//! sidecar's, the integration tests against real engines): poll a condition until it holds,
//! or fail after a deadline with a message naming what never happened and what was last
//! seen. Tests wait this way, never with a bare sleep: a sleep is either too short on a
//! loaded machine (a real engine on a busy 2-core machine takes anywhere from milliseconds
//! to seconds) or wastes time on an idle one, and when it is too short the failure says
//! nothing about why.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// First pause between polls; it doubles up to [`MAX_PAUSE`] (loopback events land in
/// microseconds, so the first polls are cheap and quick; a slow check, such as a call to a
/// real engine, paces itself).
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

/// [`wait_for`] a condition that shows nothing but whether it holds.
pub async fn wait_until(
    what: impl Display,
    within: Duration,
    mut check: impl AsyncFnMut() -> bool,
) {
    wait_for(what, within, async || {
        if check().await {
            Ok(())
        } else {
            Err("not yet")
        }
    })
    .await
}

/// [`wait_for`] on a plain thread (tests that drive a synchronous worker).
pub fn wait_for_blocking<T, S: Display>(
    what: impl Display,
    within: Duration,
    mut check: impl FnMut() -> Result<T, S>,
) -> T {
    let deadline = Instant::now() + within;
    let mut pause = FIRST_PAUSE;
    loop {
        let seen = match check() {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            panic!("{what} never happened within {within:?}; last seen: {seen}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}
