//! `recache bench peers`' command line. The flags named in the issue that asked for this
//! benchmark (`--replicas`, `--data`, `--items`, `--trace`, `--workloads`, `--peers`,
//! `--requests`, `--repeat`, `--json`) are a contract: scripts outside the repository call them.

use std::path::PathBuf;
use std::time::Duration;

/// A workload of the comparison.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// A static upstream: the latency each gateway adds and the throughput it keeps.
    Overhead,
    /// A Mooncake conversation trace, rendered as text, on the replicas with capped KV.
    Trace,
    /// GR ranking (BAT §6.1 and returning users) at equal memory: `/v1/rank` against
    /// user-first prompts through each peer.
    Gr,
    /// Generative retrieval: recache's /v1/retrieve against vLLM's beam search through each
    /// peer, post-filtered to valid items, at each of --widths.
    Retrieve,
    /// Token-id prompts, streaming and a replica killed mid-run: errors per system.
    Faults,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Overhead => "overhead",
            Workload::Trace => "trace",
            Workload::Gr => "gr",
            Workload::Retrieve => "retrieve",
            Workload::Faults => "faults",
        }
    }
}

/// A peer gateway.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// sglang-router 0.3.2 (`--policy cache_aware`)
    SglangRouter,
    /// vllm-router 0.1.17 (`--policy cache_aware`)
    VllmRouter,
}

#[derive(clap::Args, Debug)]
pub struct PeersArgs {
    /// Engine replicas the trace and faults workloads start from the testbed (vLLM, capped KV)
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=8))]
    pub replicas: u16,
    /// Running engine replicas to use instead of starting testbed ones (repeat; vLLM)
    #[arg(long = "upstream")]
    pub upstream: Vec<String>,
    /// Each --upstream's KV-event publisher, same order (recache's routing mirrors)
    #[arg(long = "kv-events")]
    pub kv_events: Vec<String>,
    /// GR user histories (Amazon format): the gr workload; their item titles (--items) also
    /// give the trace workload the words its text prompts are made of
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Item titles (JSON, as bench gr takes them); the retrieve workload's catalog (indexed with
    /// recache items index's defaults)
    #[arg(long)]
    pub items: Option<PathBuf>,
    /// Mooncake-format trace for the trace workload
    #[arg(
        long,
        default_value = "../shared/data/mooncake/conversation_trace.jsonl"
    )]
    pub trace: PathBuf,
    /// Workloads, in order
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "overhead,trace,faults"
    )]
    pub workloads: Vec<Workload>,
    /// Peer gateways compared with recache
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "sglang-router,vllm-router"
    )]
    pub peers: Vec<Peer>,
    /// Requests per system and round (trace, faults; retrieve: users, one retrieval each per
    /// width)
    #[arg(long, default_value_t = 300)]
    pub requests: usize,
    /// Rounds; each round runs every system once, in an order that rotates between rounds
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Offered load of the trace workload, requests/s: the trace's own gaps, scaled to it
    #[arg(long, default_value_t = 4.0)]
    pub rate: f64,
    /// KV blocks (32 tokens) of each testbed replica
    #[arg(long, default_value_t = 512)]
    pub kv_blocks: u64,
    /// The engines' max model length; longer trace prompts are cut to whole blocks
    #[arg(long, default_value_t = 8192)]
    pub max_model_len: usize,
    /// Measured time per overhead phase (concurrency 1, then --concurrency)
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Connections of the overhead workload's throughput phase
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Load generator of the overhead workload: auto (wrk when on PATH), wrk or builtin
    #[arg(long, default_value = "auto", value_parser = ["auto", "wrk", "builtin"])]
    pub load: String,
    /// Beam widths of the retrieve workload
    #[arg(long, value_delimiter = ',', default_value = "32,128")]
    pub widths: Vec<usize>,
    /// Retrievals in flight at once in the retrieve workload (a closed loop per system × width)
    #[arg(long, default_value_t = 4)]
    pub retrieve_concurrency: usize,
    /// The peers' venv (created and filled from PyPI when missing)
    /// [default: $RECACHE_TESTBED_HOME/venv-peers, else ~/.cache/recache-testbed/venv-peers]
    #[arg(long)]
    pub peers_venv: Option<PathBuf>,
    /// The engine testbed's scripts
    #[arg(long, default_value = crate::testbed::DIR)]
    pub testbed_dir: PathBuf,
    /// The model the testbed replicas serve (`up --model`); equal-memory byte budgets use its
    /// KV bytes a token
    #[arg(long, value_enum, env = crate::testbed::MODEL_ENV, default_value = "tiny")]
    pub testbed_model: crate::testbed::ModelKind,
    /// One JSON object per line (per system × workload × round, then summaries); else a table
    #[arg(long)]
    pub json: bool,
    /// Also write one PNG per workload: FILE-WORKLOAD.png
    #[arg(long)]
    pub out: Option<PathBuf>,
    // gr also reads --requests (per stream), --rate, --replicas and --max-model-len.
    /// gr: users of the returning-user stream (BAT's stream draws from every user of --data)
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub gr_users: u16,
    /// gr: recache's item pool also serves user-first prompts, after the user's cached
    /// profile (`recache serve --rank-pool-after-user`: for a model trained with that layout)
    #[arg(long)]
    pub pool_after_user: bool,
    /// gr: the streams to run, in order: bat (BAT's, one-off users) and returning
    #[arg(long, value_delimiter = ',', default_value = "bat,returning")]
    pub gr_streams: Vec<String>,
    /// gr: each replica's KV in 32-token blocks, engine cache and item pool together (equal
    /// memory: recache's replicas give their pool's items' worth of them to the pool)
    #[arg(long, default_value_t = 1024)]
    pub gr_kv_blocks: u64,
    /// gr: item pool slots per replica of recache's set, the stream's past period's hottest
    /// items precomputed at start-up [default: per stream, what BAT's split of one replica's
    /// --gr-kv-blocks pools from the stream's past period, after the engine's working set]
    #[arg(long)]
    pub pool_items: Option<usize>,
    /// gr: how recache's item pools keep K/V (`int8`: about twice the items in the same
    /// bytes, `int4` 3.56x, at coarser steps: `up --item-pool-codec`); the split counts the
    /// pool's bytes at that size
    #[arg(long, value_enum, default_value = "bf16")]
    pub pool_codec: crate::testbed::PoolCodec,
    /// gr: more `--routing gr` parameters for recache, after the `blocks=N` sized to its
    /// engines (e.g. `balance=100:queue_gap=1000`: the load bound and queue gap off)
    #[arg(long)]
    pub recache_route_params: Option<String>,
    /// The testbed replicas' engine: vllm, or sglang (the gr workload only, with recache's
    /// SGLang item pool linker, against sglang-router; vllm-router fronts vLLM only)
    #[arg(long, default_value = "vllm")]
    pub engine: recache_adapters::Engine,
}

impl PeersArgs {
    /// The testbed model the replicas serve (`--testbed-model`), with its KV bytes a token.
    pub fn model(&self) -> Result<crate::testbed::Model, crate::error::BenchError> {
        crate::testbed::Model::resolve(self.testbed_model)
    }
}
