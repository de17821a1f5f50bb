//! `recache bench route`'s command line.

use std::path::PathBuf;

use recache_adapters::Engine;

#[derive(clap::Args, Debug)]
pub struct RouteArgs {
    /// Engine replicas (repeat), e.g. http://127.0.0.1:8000
    #[arg(long = "upstream", required = true)]
    pub upstream: Vec<String>,
    /// Each replica's KV-event publisher, in --upstream order: per-replica routing mirrors
    /// (checked by canaries); without them `prefix` runs on recache's record of what it sent
    #[arg(long = "kv-events")]
    pub kv_events: Vec<String>,
    /// Mooncake-format trace (JSONL with hash_ids)
    #[arg(long)]
    pub trace: Option<PathBuf>,
    /// GR ranking load instead of a trace: user histories (Amazon format, as bench gr takes)
    #[arg(long, requires = "items", conflicts_with = "trace")]
    pub data: Option<PathBuf>,
    /// GR item titles (with --data)
    #[arg(long, requires = "data")]
    pub items: Option<PathBuf>,
    /// Seed of the GR request stream (--data)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// GR load over this many users (bench gr's default workload) instead of BAT's stream
    /// over every user of --data
    #[arg(long, requires = "data")]
    pub users: Option<usize>,
    /// GR load with the item KV pool (bench gr's `bat-pool` mode): N item slots per replica,
    /// each strategy's pools precomputed from a past period before its stream (start each
    /// replica with `examples/testbed/up --item-pool`)
    #[arg(long, requires = "data")]
    pub pool_items: Option<usize>,
    /// The item pool's store (host:port of a Mooncake master, or redis://host:port) the
    /// replicas' connectors write fills through to (start each replica with
    /// `examples/testbed/up --item-pool --pool-store ..`):
    /// recache serves an item another replica's pool holds from it (`--rank-pool-store`);
    /// rows gain `pool_bytes_per_replica`, `store_hit_rate` and the store's bytes
    #[arg(long, requires = "pool_items", value_name = "ADDR")]
    pub pool_store: Option<String>,
    /// recache instances in front of the same replicas (request i goes to instance i mod N):
    /// they share nothing but the replicas and, with --kv-events, their events
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub instances: u16,
    /// Comma-separated routing specs, as --routing takes them
    #[arg(long, default_value = "least-loaded,prefix", value_delimiter = ',')]
    pub strategies: Vec<String>,
    /// The engines' dialect: vllm or sglang [default: detected from the first replica]
    #[arg(long)]
    pub engine: Option<Engine>,
    /// Requests replayed from the start of the trace
    #[arg(long, default_value_t = 1000)]
    pub requests: usize,
    /// Requests in flight at once
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Each replica's KV cache in 32-token blocks (testbed --kv-blocks); `prefix` without
    /// `blocks=` remembers this many keys per replica
    #[arg(long, default_value_t = 512)]
    pub kv_blocks: usize,
    /// The engines' max model length; longer prompts are truncated to whole blocks
    #[arg(long, default_value_t = 8192)]
    pub max_model_len: usize,
    /// Print one JSON object per strategy (else a table)
    #[arg(long)]
    pub json: bool,
    /// Also write a PNG: hit rate, rps and busiest-replica share per strategy
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Draw --out from the strategy rows of an earlier --json run's output (runs nothing)
    #[arg(long, requires = "out")]
    pub replot: Option<PathBuf>,
    /// Only time routing decisions with 100k keys per replica, first from the record alone,
    /// then with a 100k-block exact mirror per replica (no engine is called; the trace's
    /// prompts are the requests; --upstream gives the replica count)
    #[arg(long)]
    pub decisions_only: bool,
}
