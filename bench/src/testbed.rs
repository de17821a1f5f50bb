//! The one place that knows the engine testbed (`examples/testbed`: vLLM and SGLang CPU
//! engines with a small model): where its scripts are, which model they serve and its KV
//! geometry ([`model`]), how to tell a user to start an engine, and `bench gr --testbed`'s
//! engines, started and stopped with the testbed's own scripts (`up` / `down`), one instance
//! per memory layout (KV blocks, item pool bytes), kept up across modes and rounds so paired
//! runs need no restart, and all stopped when the benchmark ends (also on error, by `Drop`); `bench route
//! --testbed` and `bench peers` start named replicas of one layout ([`Testbed::start_named`]),
//! with an item pool's store when one is set ([`Testbed::with_pool_store`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::BenchError;

pub mod model;
pub use model::{MODEL_ENV, Model, ModelKind, PoolCodec};

/// The testbed's scripts, relative to the repository root (`--testbed-dir`'s default).
pub const DIR: &str = "examples/testbed";
/// Tokens per KV block of the testbed's engines (`--block-size`'s default).
pub const BLOCK_TOKENS: u64 = 32;
/// KV bytes of one token of the tiny testbed model: 4 layers x 2 KV heads x 64 dims x 2 (K, V)
/// x 2 bytes (bf16); a run's own model's comes from [`Model::resolve`].
pub const KV_TOKEN_BYTES: u64 = 2048;

/// How to start a testbed engine with `flags`, for messages: `examples/testbed/up FLAGS`.
pub fn up_command(flags: &str) -> String {
    format!("{DIR}/up {flags}")
}

/// A memory layout one engine is started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    pub kv_blocks: u64,
    /// Host bytes of the item pool's connector; 0 = no connector.
    pub pool_bytes: u64,
}

/// A running engine of the testbed.
#[derive(Debug, Clone)]
pub struct Instance {
    pub name: String,
    pub upstream: String,
    pub kv_events: Option<String>,
}

/// The engines started so far.
pub struct Testbed {
    dir: PathBuf,
    /// KV bytes of one 32-token block, to size vLLM's CPU KV space.
    block_bytes: u64,
    /// The item pool's store (`up --pool-store`) of every engine started with a pool.
    pool_store: Option<String>,
    pool_codec: PoolCodec,
    /// `up --max-logprobs` of every engine started from now on [the testbed's default, 200].
    max_logprobs: Option<u64>,
    /// `up --retrieve-plugin` on every engine started from now on.
    retrieve_plugin: bool,
    /// `up --model` of every engine started from now on [`up`'s: `$RECACHE_TESTBED_MODEL`].
    model: Option<ModelKind>,
    /// `up --engine` of every engine started from now on [`up`'s: `$RECACHE_TESTBED_ENGINE`].
    engine: Option<recache_adapters::Engine>,
    started: Vec<(Layout, Instance)>,
}

impl Testbed {
    pub fn new(dir: &Path, block_bytes: u64) -> Result<Self, BenchError> {
        if !dir.join("up").is_file() {
            return Err(BenchError::Setup(format!(
                "--testbed: no {}/up (run from the repository root or set --testbed-dir)",
                dir.display()
            )));
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            block_bytes,
            pool_store: None,
            pool_codec: PoolCodec::Bf16,
            max_logprobs: None,
            retrieve_plugin: false,
            model: None,
            engine: None,
            started: Vec::new(),
        })
    }

    /// Engines started with an item pool from now on write it through to `store` (a Mooncake
    /// master's `host:port` or `redis://HOST:PORT`, as `up --pool-store` takes it).
    pub fn with_pool_store(mut self, store: Option<String>) -> Self {
        self.pool_store = store;
        self
    }

    /// Engines started with an item pool from now on keep it as `codec` says.
    pub fn with_pool_codec(mut self, codec: PoolCodec) -> Self {
        self.pool_codec = codec;
        self
    }

    /// Engines started from now on return up to `n` logprobs per token (`up --max-logprobs`;
    /// vLLM's beam search asks for 2 x its width).
    pub fn with_max_logprobs(mut self, n: Option<u64>) -> Self {
        self.max_logprobs = n;
        self
    }

    /// Loads recache's retrieval endpoint plugin into every engine started from now on.
    pub fn with_retrieve_plugin(mut self, on: bool) -> Self {
        self.retrieve_plugin = on;
        self
    }

    /// Engines started from now on are `engine`'s (`up --engine`; None: `up`'s default).
    pub fn with_engine(mut self, engine: Option<recache_adapters::Engine>) -> Self {
        self.engine = engine;
        self
    }

    /// Engines started from now on serve `kind` (`up --model`).
    pub fn with_model(mut self, kind: ModelKind) -> Self {
        self.model = Some(kind);
        self
    }

    /// The engine for `layout`, started now if it is not running yet (a minute or two).
    pub fn get(&mut self, layout: Layout) -> Result<Instance, BenchError> {
        if let Some((_, i)) = self.started.iter().find(|(l, _)| *l == layout) {
            return Ok(i.clone());
        }
        let name = format!(
            "gr-{}b-{}m",
            layout.kv_blocks,
            layout.pool_bytes.div_ceil(1 << 20)
        );
        self.start_named(&name, layout)
    }

    /// Starts one more engine named `name` with `layout` (several replicas of one layout
    /// need their own names); stopped with the others.
    pub fn start_named(&mut self, name: &str, layout: Layout) -> Result<Instance, BenchError> {
        let name = name.to_string();
        let mut cmd = Command::new(self.dir.join("up"));
        cmd.args([
            "--name",
            &name,
            "--kv-blocks",
            &layout.kv_blocks.to_string(),
        ]);
        if layout.pool_bytes > 0 {
            cmd.args([
                "--item-pool",
                "--item-pool-bytes",
                &layout.pool_bytes.to_string(),
            ]);
            if self.pool_codec != PoolCodec::Bf16 {
                cmd.args(["--item-pool-codec", self.pool_codec.name()]);
            }
            if let Some(store) = &self.pool_store {
                cmd.args(["--pool-store", store]);
            }
        }
        if let Some(kind) = self.model {
            cmd.args(["--model", kind.name()]);
        }
        if let Some(engine) = self.engine {
            cmd.args(["--engine", engine.name()]);
        }
        if let Some(n) = self.max_logprobs {
            cmd.args(["--max-logprobs", &n.to_string()]);
        }
        if self.retrieve_plugin {
            cmd.arg("--retrieve-plugin");
        }
        // vLLM's CPU KV space (GiB) must hold the blocks; the block count is the real cap.
        let gib = (layout.kv_blocks * self.block_bytes).div_ceil(1 << 30) + 1;
        cmd.env("VLLM_CPU_KVCACHE_SPACE", gib.to_string());
        let store = match (&self.pool_store, layout.pool_bytes) {
            (Some(s), 1..) => format!(", store {s}"),
            _ => String::new(),
        };
        let model = self
            .model
            .map_or(String::new(), |k| format!("{}, ", k.name()));
        eprintln!(
            "bench: starting testbed engine {name} ({model}{} KV blocks, pool {} bytes{store}) \
             ...",
            layout.kv_blocks, layout.pool_bytes
        );
        let out = cmd
            .stderr(std::process::Stdio::inherit())
            .output()
            .map_err(BenchError::io(format!("running {}/up", self.dir.display())))?;
        if !out.status.success() {
            return Err(BenchError::Setup(format!(
                "{}/up --name {name} failed ({})",
                self.dir.display(),
                out.status
            )));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
        };
        let instance = Instance {
            upstream: field("UPSTREAM=").ok_or_else(|| {
                BenchError::Setup(format!(
                    "{}/up printed no UPSTREAM= line",
                    self.dir.display()
                ))
            })?,
            kv_events: field("KV_EVENTS="),
            name,
        };
        self.started.push((layout, instance.clone()));
        Ok(instance)
    }

    /// Stops every engine this testbed started.
    pub fn stop_all(&mut self) {
        for (_, i) in self.started.drain(..) {
            let status = Command::new(self.dir.join("down"))
                .args(["--name", &i.name])
                .stdout(std::process::Stdio::null())
                .status();
            if !matches!(status, Ok(s) if s.success()) {
                eprintln!("bench: warning: could not stop testbed engine {}", i.name);
            }
        }
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        self.stop_all();
    }
}
