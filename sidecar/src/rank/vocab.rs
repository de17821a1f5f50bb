//! Whether every label token recache may send exists in the served model's vocabulary.
//!
//! Candidate k is scored by the log-probability of its label token (`--rank-label-base` + k),
//! and each pooled item keeps its own label above those (`--rank-item-pool` slots). An id the
//! model does not have would make the engine refuse every ranking request — or, on an engine
//! that clamps ids, score the wrong token — so recache asks the engine once, with a one-token
//! scoring request for the highest label it may use, and remembers the verdict. `recache
//! serve` asks as soon as a replica is healthy and logs an error naming the flags; `/v1/rank`
//! then answers that error instead of a wrong score. Until the engine has answered, requests
//! go through (the check never blocks serving).

use std::sync::Mutex;

use serde_json::Value;

use super::config::RankConfig;
use crate::engine::EngineError;

/// What the engine said about the highest label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Not asked yet, or the engine could not be reached.
    Unknown,
    Fits,
    /// The engine refused the id: the message names the flags to change.
    TooSmall(String),
}

pub struct VocabCheck {
    /// The highest label token id recache may send.
    pub highest: u32,
    /// The flags that produce it, for the error message.
    flags: String,
    verdict: Mutex<Verdict>,
}

impl VocabCheck {
    /// For `replicas` engine replicas (with a store, each replica's pool has its own labels).
    pub fn new(config: &RankConfig, replicas: usize) -> Self {
        let positional = config.label_base as u64 + config.max_items as u64;
        let pooled = (config.item_pool.as_ref())
            .map_or(0, |p| crate::itempool::cold::label_span(p, replicas));
        let highest = (positional + pooled).saturating_sub(1).min(u32::MAX as u64) as u32;
        let mut flags = format!(
            "--rank-label-base {} + --rank-max-items {}",
            config.label_base, config.max_items
        );
        match config.item_pool.as_ref() {
            Some(p) if pooled > p.items as u64 => {
                flags += &format!(" + {replicas} replicas x --rank-item-pool {}", p.items)
            }
            _ if pooled > 0 => flags += &format!(" + --rank-item-pool {pooled}"),
            _ => {}
        }
        Self {
            highest,
            flags,
            verdict: Mutex::new(Verdict::Unknown),
        }
    }

    pub fn verdict(&self) -> Verdict {
        self.verdict
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The error to answer ranking requests with, once the engine refused the label range.
    pub fn refusal(&self) -> Option<EngineError> {
        match self.verdict() {
            Verdict::TooSmall(msg) => Some(EngineError::Config(msg)),
            _ => None,
        }
    }

    /// Records the engine's answer to the probe ([`EngineError::Engine`] with a 4xx status:
    /// the id is refused; any other error leaves the verdict unknown). Returns the verdict.
    pub fn record(&self, answer: &Result<Value, EngineError>) -> Verdict {
        let verdict = match answer {
            Ok(_) => Verdict::Fits,
            Err(EngineError::Engine { status, body }) if status.is_client_error() => {
                let said = body["error"]["message"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| body.to_string());
                Verdict::TooSmall(format!(
                    "ranking labels reach token id {} ({} - 1) but the served model refuses it \
                     ({said}); lower --rank-item-pool (or --rank-label-base / --rank-max-items) \
                     or serve a model whose vocabulary has more than {} ids",
                    self.highest, self.flags, self.highest
                ))
            }
            Err(_) => Verdict::Unknown,
        };
        *self.verdict.lock().unwrap_or_else(|e| e.into_inner()) = verdict.clone();
        verdict
    }
}

#[cfg(test)]
#[path = "vocab_tests.rs"]
mod tests;
