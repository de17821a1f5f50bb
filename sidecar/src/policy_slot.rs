//! The eviction policy `recache serve` runs, behind an atomic swap.
//!
//! A new policy is parsed and checked off the request path (in the admin handler), then
//! published with one pointer swap; readers load the current one without locking. The choice
//! is a [`PolicyConfig`] (the eviction crate's serde enum, so policy names live in one place).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use prometheus::{IntCounter, IntGaugeVec, Opts};
use recache_eviction::PolicyConfig;

/// One published choice.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ActivePolicy {
    /// The policy and its parameters, e.g. `{"policy": "laru", "lambda_min_misses": null}`.
    pub config: PolicyConfig,
    /// Increments on every swap, so a consumer can tell it must rebuild.
    pub generation: u64,
    /// Unix seconds when it was published.
    pub since: u64,
}

/// A policy that `recache serve` cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    #[error("{message}")]
    Invalid { message: String },
}

/// Holds the active policy and its gauges.
pub struct PolicySlot {
    current: ArcSwap<ActivePolicy>,
    active: IntGaugeVec,
    swaps: IntCounter,
}

impl PolicySlot {
    pub fn new(
        initial: PolicyConfig,
        metrics: &crate::metrics::Metrics,
    ) -> Result<Self, prometheus::Error> {
        let active = IntGaugeVec::new(
            Opts::new(
                "eviction_policy_active",
                "1 for the eviction policy in use, 0 for the others",
            ),
            &["policy"],
        )?;
        let swaps = IntCounter::new(
            "eviction_policy_swaps_total",
            "Eviction policy changes through the admin API",
        )?;
        let (active, swaps) = (metrics.add(active)?, metrics.add(swaps)?);
        let slot = Self {
            current: ArcSwap::from_pointee(published(initial, 0)),
            active,
            swaps,
        };
        slot.show();
        Ok(slot)
    }

    /// The policy in use now (lock-free).
    pub fn load(&self) -> Arc<ActivePolicy> {
        self.current.load_full()
    }

    /// Checks and publishes a new policy; returns what is now active.
    pub fn swap(&self, config: PolicyConfig) -> Result<Arc<ActivePolicy>, SlotError> {
        check_servable(&config)?;
        let next = Arc::new(published(config, self.current.load().generation + 1));
        self.current.store(next.clone());
        self.swaps.inc();
        self.show();
        Ok(next)
    }

    fn show(&self) {
        let name = self.current.load().config.name();
        for n in servable_names() {
            self.active
                .with_label_values(&[n])
                .set(i64::from(n == name));
        }
    }
}

fn published(config: PolicyConfig, generation: u64) -> ActivePolicy {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    ActivePolicy {
        config,
        generation,
        since,
    }
}

/// Policies a live server can run: all but those that need the future of the trace, and,
/// in a build without the `lightgbm` feature, those that need the learned predictor.
pub fn servable_names() -> Vec<&'static str> {
    PolicyConfig::NAMES
        .iter()
        .copied()
        .filter(|n| PolicyConfig::from_name(n).is_ok_and(|c| servable(&c)))
        .collect()
}

fn servable(config: &PolicyConfig) -> bool {
    !config.needs_future() && (cfg!(feature = "lightgbm") || !config.needs_lightgbm())
}

/// Rejects offline-only policies with the list of those that work.
pub fn check_servable(config: &PolicyConfig) -> Result<(), SlotError> {
    if config.needs_future() {
        return Err(SlotError::Invalid {
            message: format!(
                "policy {:?} needs the future of the trace and runs only in `recache sim`; valid: {}",
                config.name(),
                servable_names().join(", ")
            ),
        });
    }
    if !servable(config) {
        return Err(SlotError::Invalid {
            message: format!(
                "policy {:?} needs the LightGBM predictor, and this recache was built without the `lightgbm` feature; valid: {}",
                config.name(),
                servable_names().join(", ")
            ),
        });
    }
    Ok(())
}

/// Parses a PUT body (`{"policy": "laru", ...params}`) with an actionable error.
pub fn parse_body(body: &[u8]) -> Result<PolicyConfig, SlotError> {
    serde_json::from_slice(body).map_err(|e| SlotError::Invalid {
        message: format!(
            "body must be {{\"policy\": NAME, ...params}} with NAME one of: {} ({e})",
            servable_names().join(", ")
        ),
    })
}

#[cfg(test)]
#[path = "policy_slot_tests.rs"]
mod tests;
