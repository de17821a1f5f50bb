//! `recache serve` settings of the engine loop (`--kv-events`, `--publish`, ...), flattened
//! into `ServeArgs` like the ranking flags; flags and environment only.

use std::path::PathBuf;
use std::time::Duration;

/// Flags of the engine loop.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KvLoopArgs {
    /// vLLM's KV-event publisher to mirror, e.g. tcp://127.0.0.1:5557 (off when absent)
    #[arg(long, env = "RECACHE_KV_EVENTS")]
    pub kv_events: Option<String>,
    /// vLLM's KV-event replay endpoint (`replay_endpoint`), used to fill sequence gaps;
    /// without it a gap clears the mirror
    #[arg(long, env = "RECACHE_KV_REPLAY")]
    pub kv_replay: Option<String>,
    /// Where to publish the eviction order for the engine shim: a file path (or file://PATH),
    /// replaced atomically; the shim reads RECACHE_SHIM_ORDER=<same path>
    #[arg(long, env = "RECACHE_PUBLISH")]
    pub publish: Option<String>,
    /// The engine's KV cache in blocks (vLLM --num-gpu-blocks-override; the testbed's
    /// --kv-blocks) [default: 1024]
    #[arg(long, env = "RECACHE_KV_ENGINE_BLOCKS")]
    pub kv_engine_blocks: Option<usize>,
    /// Tokens per KV block [default: 32]
    #[arg(long, env = "RECACHE_KV_BLOCK_SIZE")]
    pub kv_block_size: Option<usize>,
    /// SGLang eviction steering without a plugin: set `priority` in forwarded /generate and
    /// /v1/(chat/)completions bodies from the active policy's view of the prompt (SGLang
    /// runs with --radix-eviction-policy priority); needs --kv-events
    #[arg(long, env = "RECACHE_SGLANG_PRIORITY", requires = "kv_events")]
    pub sglang_priority: bool,
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
}

impl KvLoopArgs {
    pub fn resolve(&self) -> Option<KvLoopConfig> {
        let kv_events = self.kv_events.clone().filter(|e| !e.is_empty())?;
        Some(KvLoopConfig {
            kv_events,
            kv_replay: self.kv_replay.clone().filter(|e| !e.is_empty()),
            publish: self
                .publish
                .as_deref()
                .filter(|p| !p.is_empty())
                .map(|p| PathBuf::from(p.strip_prefix("file://").unwrap_or(p))),
            engine_blocks: self.kv_engine_blocks.unwrap_or(1024).max(2),
            block_size: self.kv_block_size.unwrap_or(32).max(1),
            refresh: Duration::from_millis(250),
            sglang_priority: self.sglang_priority,
        })
    }
}
