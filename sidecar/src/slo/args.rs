//! The flags of deadline serving (flattened into `recache serve`; their `RECACHE_*` variables
//! and TOML keys are resolved by the settings module like every other flag) and their checks.

use std::time::Duration;

use super::{DEFAULT_DISPATCH_THRESHOLD, MAX_DEADLINE_MS, SloSettings};

/// `--slo on|off`.
#[derive(clap::ValueEnum, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Switch {
    On,
    Off,
}

#[derive(clap::Args, Debug, Clone, Default)]
pub struct SloArgs {
    /// Serve requests that carry a deadline (x-recache-deadline-ms, or a route default below)
    /// to it: admission, least-slack ordering, early 429s, load-aware dispatch. off: a plain
    /// proxy that ignores deadlines [default: on]
    #[arg(long, env = "RECACHE_SLO")]
    pub slo: Option<Switch>,
    /// Deadline of a /v1/rank request that gives none, e.g. 200ms [default: none]
    #[arg(long, env = "RECACHE_SLO_RANK_DEADLINE", value_parser = humantime::parse_duration)]
    pub slo_rank_deadline: Option<Duration>,
    /// Deadline of a /v1/completions request that gives none [default: none]
    #[arg(long, env = "RECACHE_SLO_COMPLETIONS_DEADLINE", value_parser = humantime::parse_duration)]
    pub slo_completions_deadline: Option<Duration>,
    /// Deadline of a /v1/chat/completions request that gives none [default: none]
    #[arg(long, env = "RECACHE_SLO_CHAT_DEADLINE", value_parser = humantime::parse_duration)]
    pub slo_chat_deadline: Option<Duration>,
    /// Leave the routing rule's replica for one whose predicted completion is shorter by more
    /// than this share of it (0: always the shortest; 1: never) [default: 0.25]
    #[arg(long, env = "RECACHE_SLO_DISPATCH_THRESHOLD")]
    pub slo_dispatch_threshold: Option<f64>,
    /// Pass deadlines into the engine's scheduler: set `priority` in forwarded generation
    /// bodies that carry a deadline (earliest deadline = lowest value). vLLM only, started
    /// with --scheduling-policy priority (otherwise vLLM refuses the field)
    #[arg(long, env = "RECACHE_SLO_ENGINE_PRIORITY")]
    pub slo_engine_priority: bool,
}

/// A setting that cannot be used: the flag and why.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {why}")]
pub struct InvalidSlo {
    pub setting: &'static str,
    pub why: String,
}

impl SloArgs {
    /// Defaults for what is unset, and checks.
    pub fn try_resolve(&self) -> Result<SloSettings, InvalidSlo> {
        let deadline = |setting: &'static str, d: Option<Duration>| match d {
            Some(d) if d.is_zero() || d > Duration::from_millis(MAX_DEADLINE_MS) => {
                Err(InvalidSlo {
                    setting,
                    why: format!("{d:?} is outside 1ms..=24h"),
                })
            }
            _ => Ok(d),
        };
        let threshold = self
            .slo_dispatch_threshold
            .unwrap_or(DEFAULT_DISPATCH_THRESHOLD);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(InvalidSlo {
                setting: "--slo-dispatch-threshold",
                why: format!("{threshold} is outside 0..=1"),
            });
        }
        Ok(SloSettings {
            enabled: self.slo != Some(Switch::Off),
            rank: deadline("--slo-rank-deadline", self.slo_rank_deadline)?,
            completions: deadline("--slo-completions-deadline", self.slo_completions_deadline)?,
            chat: deadline("--slo-chat-deadline", self.slo_chat_deadline)?,
            dispatch_threshold: threshold,
            engine_priority: self.slo_engine_priority,
        })
    }
}
