//! `recache serve` settings of the engine loop (`--kv-events`, `--publish`, ...), flattened
//! into `ServeArgs` like the ranking flags. This module owns their meaning and their checks;
//! which source (flag, environment, TOML file) gave a value is settled by the caller, which
//! fills [`KvLoopArgs`] before resolving it.

use std::path::PathBuf;
use std::time::Duration;

const DEFAULT_ENGINE_BLOCKS: usize = 1024;
const DEFAULT_BLOCK_SIZE: usize = 32;
/// vLLM keeps a null block and a partial tail block out of its cache (see the worker), so a
/// smaller cache holds nothing the mirror could model.
const MIN_ENGINE_BLOCKS: usize = 2;

/// Flags of the engine loop.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KvLoopArgs {
    /// The engine's KV-event publisher to mirror, e.g. tcp://127.0.0.1:5557 (off when
    /// absent). With several --upstream, repeat it (or comma-separate) once per upstream, in
    /// the same order: each replica then gets its own routing mirror; the engine loop
    /// (eviction order, GR prefix selection) follows the first
    #[arg(long, env = "RECACHE_KV_EVENTS", value_delimiter = ',')]
    pub kv_events: Vec<String>,
    /// vLLM's KV-event replay endpoint (`replay_endpoint`), used to fill sequence gaps;
    /// without it a gap clears the mirror
    #[arg(long, env = "RECACHE_KV_REPLAY")]
    pub kv_replay: Option<String>,
    /// Where to publish the eviction order for the engine shim: a file path (or file://PATH),
    /// replaced atomically; the shim reads RECACHE_SHIM_ORDER=<same path>
    #[arg(long, env = "RECACHE_PUBLISH")]
    pub publish: Option<String>,
    /// The engine's KV cache in blocks (vLLM --num-gpu-blocks-override; the testbed's
    /// --kv-blocks), at least 2 [default: 1024]
    #[arg(long, env = "RECACHE_KV_ENGINE_BLOCKS")]
    pub kv_engine_blocks: Option<usize>,
    /// Tokens per KV block [default: 32]
    #[arg(long, env = "RECACHE_KV_BLOCK_SIZE")]
    pub kv_block_size: Option<usize>,
    /// SGLang eviction steering without a plugin: set `priority` in forwarded /generate and
    /// /v1/(chat/)completions bodies from the active policy's view of the prompt (SGLang
    /// runs with --radix-eviction-policy priority); needs --kv-events
    // Checked in `try_resolve`, not by clap's `requires`, so `kv_events` may come from the file.
    #[arg(long, env = "RECACHE_SGLANG_PRIORITY")]
    pub sglang_priority: bool,
    /// Requests the engine runs at once, as the shadow models them: a request's blocks stay
    /// pinned until N - 1 more have arrived, never named in the order [default: 1]
    #[arg(long, env = "RECACHE_SHADOW_IN_FLIGHT")]
    pub shadow_in_flight: Option<usize>,
}

/// Resolved engine-loop settings; `None` in `Config` when `--kv-events` is absent.
#[derive(Debug, Clone, PartialEq)]
pub struct KvLoopConfig {
    pub kv_events: String,
    pub kv_replay: Option<String>,
    pub publish: Option<PathBuf>,
    pub engine_blocks: usize,
    pub block_size: usize,
    /// Re-publish at least this often, so a live order never looks stale to the shim.
    pub refresh: Duration,
    /// Rewrite forwarded bodies with SGLang `priority` (`--sglang-priority`).
    pub sglang_priority: bool,
    /// `--shadow-in-flight`, at least 1.
    pub shadow_in_flight: usize,
}

/// An engine-loop value that cannot be used, named by its flag.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{setting}: {why}")]
pub struct InvalidKvLoop {
    pub setting: &'static str,
    pub why: String,
}

impl KvLoopArgs {
    /// Resolves, panicking on a value [`KvLoopArgs::try_resolve`] refuses: for callers that
    /// build the arguments in code. `recache serve` goes through `try_resolve`.
    pub fn resolve(&self) -> Option<KvLoopConfig> {
        self.try_resolve()
            .unwrap_or_else(|e| panic!("engine-loop settings: {e}"))
    }

    /// The engine loop's settings, `None` without `--kv-events`, or the first unusable value.
    pub fn try_resolve(&self) -> Result<Option<KvLoopConfig>, InvalidKvLoop> {
        let invalid = |setting, why: &str| InvalidKvLoop {
            setting,
            why: why.to_string(),
        };
        let Some(kv_events) = self.kv_events.first().cloned().filter(|e| !e.is_empty()) else {
            if self.sglang_priority {
                return Err(invalid(
                    "--sglang-priority",
                    "needs --kv-events (SGLang's KV-event endpoint): priorities come from the mirror",
                ));
            }
            // The sizes below describe the mirror, so without one they are not checked.
            return Ok(None);
        };
        let engine_blocks = self.kv_engine_blocks.unwrap_or(DEFAULT_ENGINE_BLOCKS);
        if engine_blocks < MIN_ENGINE_BLOCKS {
            return Err(invalid(
                "--kv-engine-blocks",
                "must be at least 2: the engine's KV cache in blocks (vLLM's --num-gpu-blocks-override)",
            ));
        }
        let block_size = self.kv_block_size.unwrap_or(DEFAULT_BLOCK_SIZE);
        if block_size == 0 {
            return Err(invalid(
                "--kv-block-size",
                "must be at least 1: tokens per KV block (vLLM's --block-size)",
            ));
        }
        Ok(Some(KvLoopConfig {
            kv_events,
            kv_replay: self.kv_replay.clone().filter(|e| !e.is_empty()),
            publish: self
                .publish
                .as_deref()
                .filter(|p| !p.is_empty())
                .map(|p| PathBuf::from(p.strip_prefix("file://").unwrap_or(p))),
            engine_blocks,
            block_size,
            refresh: Duration::from_millis(250),
            sglang_priority: self.sglang_priority,
            shadow_in_flight: self.shadow_in_flight.unwrap_or(1).max(1),
        }))
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
