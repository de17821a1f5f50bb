//! `recache bench costfit`'s command line.

use std::path::PathBuf;

/// A kind of prefill the fit sees.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A prompt nothing of which is cached.
    Fresh,
    /// New tokens after a prefix in the engine's prefix cache.
    Cached,
    /// A bat-pool ranking prompt: its items loaded from the item pool, the rest computed.
    Pooled,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Fresh, Kind::Cached, Kind::Pooled];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Fresh => "fresh",
            Kind::Cached => "cached",
            Kind::Pooled => "pooled",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct CostfitArgs {
    /// Engine base URL: a vLLM testbed engine started with `examples/testbed/up --item-pool`
    /// (VLLM_SERVER_DEV_MODE=1). Without it the bench starts one with the testbed and stops it
    /// at the end
    #[arg(long)]
    pub upstream: Option<String>,
    /// With --upstream: the engine's KV-event publisher (the testbed's KV_EVENTS=), which the
    /// pooled kind's recache (bat-pool) follows as `bench gr` does
    #[arg(long, requires = "upstream")]
    pub kv_events: Option<String>,
    /// The testbed model (`examples/testbed/up --model`) of the engine the bench starts; every
    /// row carries it. With --upstream, say which model that engine serves
    #[arg(long, value_enum, env = crate::testbed::MODEL_ENV, default_value = "tiny")]
    pub model: crate::testbed::ModelKind,
    /// Served model name [default: the engine's first model]
    #[arg(long)]
    pub served_model: Option<String>,
    /// The served model's config.json, for the FLOP ratio [default: config.json in the
    /// model directory the engine names as its model's `root` in /v1/models]
    #[arg(long)]
    pub model_config: Option<PathBuf>,
    /// Kinds of prefill to measure, in order
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "fresh,cached,pooled"
    )]
    pub kinds: Vec<Kind>,
    /// Fresh prompts' lengths in tokens
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "256,512,1024,2048,3072,4096,5120,6144,7168"
    )]
    pub fresh_tokens: Vec<u64>,
    /// Cached kind: prefix lengths P (tokens; whole 32-token blocks are what vLLM caches)
    #[arg(long, value_delimiter = ',', default_value = "512,2048,4096")]
    pub prefix_tokens: Vec<u64>,
    /// Cached kind: new tokens T after each prefix
    #[arg(long, value_delimiter = ',', default_value = "64,256,1024,2048")]
    pub extend_tokens: Vec<u64>,
    /// Pooled kind: the interaction file (`bench gr --data`)
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Pooled kind: the item file (`bench gr --items`)
    #[arg(long)]
    pub items: Option<PathBuf>,
    /// Pooled kind: bat-pool ranking requests of `bench gr --workload bat` (its defaults: 100
    /// candidates of 18 tokens, profiles of 1024..8192-prompt tokens), all their items resident
    /// in the pool
    #[arg(long, default_value_t = 24)]
    pub pooled_requests: usize,
    /// Every point this many times (fresh tokens, a new prefix, a new salt for the pooled
    /// requests each round)
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Seed of the prompts' token ids and of the pooled requests' draw
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write a PNG: measured prefill time against the fit's prediction, per kind
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// KV blocks of the engine the bench starts (the testbed's default)
    #[arg(long, default_value_t = 1024)]
    pub kv_blocks: u64,
    /// Item pool bytes of the engine the bench starts (the testbed's default)
    #[arg(long, default_value_t = 268_435_456)]
    pub pool_bytes: u64,
    /// The testbed scripts' folder
    #[arg(long, default_value = crate::testbed::DIR)]
    pub testbed_dir: PathBuf,
}
