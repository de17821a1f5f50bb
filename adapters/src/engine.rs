//! Which engine recache fronts, and the parts of its dialect the proxy needs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::vllm;

/// An inference engine recache knows how to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// vLLM's OpenAI-compatible server (`vllm.entrypoints.openai.api_server`).
    #[default]
    Vllm,
}

impl Engine {
    /// Every engine, in the order help texts list them.
    pub const ALL: &'static [Engine] = &[Engine::Vllm];

    /// The lowercase name used on the command line and in config files.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
        }
    }

    /// Path that answers 200 once the engine can serve; recache probes it to decide health.
    pub fn health_path(self) -> &'static str {
        match self {
            Engine::Vllm => vllm::HEALTH_PATH,
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The engine name given is not one recache supports.
#[derive(Debug, thiserror::Error)]
#[error("unknown engine {given:?}; valid engines: {valid}")]
pub struct UnknownEngine {
    given: String,
    valid: String,
}

impl FromStr for Engine {
    type Err = UnknownEngine;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Engine::ALL
            .iter()
            .copied()
            .find(|e| e.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| UnknownEngine {
                given: s.to_string(),
                valid: Engine::ALL
                    .iter()
                    .map(|e| e.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_rejects_unknown_with_the_valid_list() {
        assert_eq!("vllm".parse::<Engine>().ok(), Some(Engine::Vllm));
        assert_eq!(" VLLM ".parse::<Engine>().ok(), Some(Engine::Vllm));
        let err = "tgi".parse::<Engine>().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unknown engine \"tgi\"; valid engines: vllm")
        );
    }
}
