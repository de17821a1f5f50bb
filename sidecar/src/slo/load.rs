//! A replica's offered load: the engine time (ms, shared out over the window's places) that
//! calls with deadlines brought in over the last [`HORIZON`], per ms of wall time. Below 1
//! the replica keeps up on average, so a burst that makes calls late passes and a late call
//! can be served once the burst has drained; at 1 or more it cannot, and late work only
//! piles up. The gate uses it to decide what best effort gets (see `gate.rs`).
//!
//! The estimate is an exponentially decayed sum: each arrival adds its work, everything
//! fades with `exp(-age / HORIZON)`; for a steady stream of work `w` per ms the sum over
//! `HORIZON` is `w` (∫ e^{-s/τ} ds / τ = 1), so no window of arrivals is stored.

use std::time::Duration;

use tokio::time::Instant;

/// How far back the offered load looks. Long enough that one burst of a bursty stream whose
/// mean the replica can serve does not read as overload (a gamma CV 3 stream at half the
/// replica's rate brings its bursts a few seconds apart), short enough to see an overload
/// within seconds.
pub const HORIZON: Duration = Duration::from_secs(10);

/// Decayed sum of the work brought in (see the module doc).
#[derive(Debug, Default, Clone)]
pub struct OfferedLoad {
    work_ms: f64,
    at: Option<Instant>,
}

impl OfferedLoad {
    fn decay(&mut self, now: Instant) {
        if let Some(t) = self.at {
            let age = now.saturating_duration_since(t).as_secs_f64();
            self.work_ms *= (-age / HORIZON.as_secs_f64()).exp();
        }
        self.at = Some(self.at.map_or(now, |t| t.max(now)));
    }

    /// A call arrived at `now` bringing `work_ms` of the replica's time.
    pub fn add(&mut self, now: Instant, work_ms: f64) {
        self.decay(now);
        self.work_ms += work_ms.max(0.0);
    }

    /// Work brought in per ms over the horizon, as of `now` (1.0: exactly what the replica
    /// can serve).
    pub fn ratio(&mut self, now: Instant) -> f64 {
        self.decay(now);
        self.work_ms / (HORIZON.as_secs_f64() * 1e3)
    }
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
