//! `recache bench gr`'s command line. Flags and JSON fields that scripts outside the repo use
//! (today's flags, `--workload bat`, `--kv-bytes`) keep their names.

use std::path::PathBuf;

use super::modes::Mode;

#[derive(clap::Args, Debug)]
pub struct GrArgs {
    /// Interaction file: one line per user, `user_id item_id item_id ...` in time order
    #[arg(long)]
    pub data: PathBuf,
    /// Item file: JSON object `{"<index>": {"title": ...}}`; item id i takes title i mod count
    #[arg(long)]
    pub items: PathBuf,
    /// Engine base URL (vLLM started with VLLM_SERVER_DEV_MODE=1 so the cache can be reset);
    /// not with --testbed, which starts its own engines
    #[arg(long, required_unless_present = "testbed", conflicts_with = "testbed")]
    pub upstream: Option<String>,
    /// Requests per mode
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// Modes to run, in order
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "re,up,ip,agnostic,bat"
    )]
    pub modes: Vec<Mode>,
    /// Print one JSON object per mode (else a table)
    #[arg(long)]
    pub json: bool,
    /// Write a PNG plot (throughput and hit rate per mode)
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Longest prompt the workload makes (the longest history maps to it)
    #[arg(long, default_value_t = 8192)]
    pub max_prompt_tokens: usize,
    /// Profile tokens of a user with a one-item history
    #[arg(long, default_value_t = 1024)]
    pub min_profile_tokens: usize,
    /// Candidates per request (the held-out item + popularity-drawn others)
    #[arg(long, default_value_t = 100)]
    pub candidates: usize,
    /// Tokens per item text
    #[arg(long, default_value_t = 18)]
    pub item_tokens: usize,
    /// Distinct active users the stream draws from (by activity; `--workload default` only)
    #[arg(long, default_value_t = 64)]
    pub users: usize,
    /// The request stream: `default` draws from --users active users; `bat` is BAT §6.1:
    /// every user of --data, with replacement by activity, arrivals sampled per user
    #[arg(long, value_enum, default_value = "default")]
    pub workload: Workload,
    /// Mean arrival rate in requests/s (exponential inter-arrival times); 0 = all at once
    /// (closed loop: saturation throughput)
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Offered loads to sweep, requests/s (0 = closed loop); replaces --rate
    #[arg(long, value_delimiter = ',')]
    pub rates: Vec<f64>,
    /// Runs of every (offered load, mode), modes alternating within each round (paired);
    /// summary rows give the median and the spread
    #[arg(long, default_value_t = 1)]
    pub repeat: usize,
    /// Write a PNG of throughput and p99 latency against offered load per mode (with --rates)
    #[arg(long)]
    pub sweep_out: Option<PathBuf>,
    /// Requests in flight at most
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// The engine's KV cache in blocks (as started), to size bat's user-prefix cache
    #[arg(long)]
    pub kv_blocks: Option<u64>,
    #[arg(long, default_value_t = crate::testbed::BLOCK_TOKENS)]
    pub block_size: u64,
    /// bat's user-prefix cache in tokens [default: (kv_blocks-1)*block_size - max_prompt_tokens]
    #[arg(long)]
    pub user_cache_tokens: Option<u64>,
    /// bat's frequency window in requests
    #[arg(long, default_value_t = 1000)]
    pub window: usize,
    /// Served model name [default: the engine's first model]
    #[arg(long)]
    pub model: Option<String>,
    /// The engine's KV-event publisher (the testbed's KV_EVENTS=): recache follows the
    /// engine's cache for the bat modes, as `recache serve --kv-events` does; without it bat
    /// uses its own model of the cache
    #[arg(long)]
    pub kv_events: Option<String>,
    /// The engine's dialect: vllm or sglang [default: detected]
    #[arg(long)]
    pub engine: Option<recache_adapters::Engine>,
    /// With --kv-events: publish the eviction order to this file for the bat modes, as
    /// `recache serve --publish` does (the testbed started with `--shim` the same path steers
    /// vLLM's eviction); bat's admission test is then on (`--rank-admission auto`)
    #[arg(long, requires = "kv_events")]
    pub publish: Option<String>,
    /// Token id of the first candidate's label in every mode's recache (`recache serve
    /// --rank-label-base`): a ranker trained with labels from 4096 needs 4096
    #[arg(long, default_value_t = recache::harness::DEFAULT_LABEL_BASE)]
    pub rank_label_base: u32,
    /// What the pool modes' recache recomputes in context after the pooled run (`recache
    /// serve --rank-pool-recompute`): none | link:k=N, with :pos=true to re-rotate pooled K to
    /// its true position; every recomputed token counts in computed_tokens
    #[arg(long, default_value = "none", value_name = "SPEC")]
    pub rank_pool_recompute: recache::harness::RecomputeSpec,
    /// Which token scores a candidate in every mode's recache (`recache serve
    /// --rank-readout`): auto (item in pooled layouts, label elsewhere), label, or item (its
    /// own first token)
    #[arg(long, value_enum, default_value = "auto")]
    pub rank_readout: recache::harness::Readout,
    /// Items recache keeps resident in the engine's item KV pool (ip-pool, bat-pool modes;
    /// needs LABEL_BASE + 128 + N <= the model's vocabulary, checked at start) [default: the
    /// --kv-bytes split, else every item of --data]
    #[arg(long)]
    pub pool_items: Option<usize>,
    /// Pool modes: compute the N most popular catalog items (by interaction count in --data)
    /// into the pool before the timed stream, as a deployment does ahead of time (untimed,
    /// reported as precompute_*) [default: the --kv-bytes split's items, else 0: cold]
    #[arg(long)]
    pub pool_warm: Option<usize>,
    /// Equal memory: every mode gets this many KV bytes in all (engine KV cache + item pool,
    /// in whole KV blocks); the pool's share is BAT's split (hottest items per token vs repeat
    /// users, after the requests in flight). Needs --testbed (or --kv-blocks and
    /// --pool-upstream as started). Pool modes without it need --allow-unequal-memory
    #[arg(long)]
    pub kv_bytes: Option<u64>,
    /// Run the pool modes (ip-pool, bat-pool) without --kv-bytes: their item pool then comes on
    /// top of the same engine KV cache as the other modes' (unequal memory; each row's
    /// kv_bytes says what that mode had). Without it such a run is refused
    #[arg(long)]
    pub allow_unequal_memory: bool,
    /// KV bytes of one token (all layers, K and V) [default: --testbed-model's, from its
    /// config.json: 2048 for tiny (4 layers x 2 KV heads x 64 dims x 2 (K, V) x 2 bytes, bf16)
    /// and for qwen2-1.5b-shape (2 x 2 x 128 x 2 x 2)]
    #[arg(long)]
    pub kv_token_bytes: Option<u64>,
    /// Start and stop the engines with the testbed (its `up` script, under --testbed-dir), one
    /// per memory layout (plain, pooled), kept up across modes and rounds
    #[arg(long)]
    pub testbed: bool,
    /// The testbed model: the one --testbed's engines serve (`up --model`), and whose KV bytes
    /// a token --kv-token-bytes defaults to
    #[arg(long, value_enum, env = crate::testbed::MODEL_ENV, default_value = "tiny")]
    pub testbed_model: crate::testbed::ModelKind,
    /// The testbed scripts' folder
    #[arg(long, default_value = crate::testbed::DIR)]
    pub testbed_dir: PathBuf,
    /// Engine for the pool modes (started with the connector and the pool's byte budget) when
    /// it is not --upstream; with --kv-bytes and no --testbed
    #[arg(long, conflicts_with = "testbed")]
    pub pool_upstream: Option<String>,
    /// Requests of the "past period" the --kv-bytes split estimates item and user frequencies
    /// from (the same generator with another seed; never the measured stream)
    #[arg(long, default_value_t = 5000)]
    pub past_requests: usize,
    /// Write each run's GR block trace (what the mode's recache sent to the engine, as `recache
    /// sim --trace` reads it): FILE for a single run, else FILE with `.MODE` (and `.rROUND`,
    /// `.RATErps` when several) before its extension
    #[arg(long, value_name = "FILE")]
    pub trace_out: Option<PathBuf>,
    /// With --trace-out: write the planned stream's traces without running it (each mode's
    /// recache rewrites every request at its planned arrival time; nothing is scored, the
    /// engine only tokenizes); not for the pool modes, whose residency comes from the engine
    #[arg(long, requires = "trace_out")]
    pub trace_only: bool,
    /// With --trace-only: also write the rewritten stream for a replay without vLLM
    /// (`shim/gpu-replay`): the memory split, then per mode and request the layout chosen, the
    /// profile's length and the items in prompt order
    #[arg(long, value_name = "FILE", requires = "trace_only")]
    pub replay_out: Option<PathBuf>,
}

impl GrArgs {
    /// KV bytes of one token: --kv-token-bytes, once `run` has resolved it from the model; the
    /// tiny model's before.
    pub fn token_bytes(&self) -> u64 {
        self.kv_token_bytes
            .unwrap_or(crate::testbed::KV_TOKEN_BYTES)
    }
}

/// Which request stream `bench gr` sends.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// `--users` active users drawn by activity, requests among them by activity.
    Default,
    /// BAT §6.1: every user of the data, with replacement by activity, per-user arrivals.
    Bat,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Default => "default",
            Workload::Bat => "bat",
        }
    }
}

/// `bench gr`'s command line with only its required flags: every other setting at its
/// default, from clap itself (benchmarks that reuse gr's workload and modes start here).
#[derive(clap::Parser)]
struct GrDefaults {
    #[command(flatten)]
    gr: GrArgs,
}

impl GrArgs {
    pub fn defaults(
        data: &std::path::Path,
        items: &std::path::Path,
        upstream: &str,
    ) -> Result<Self, crate::error::BenchError> {
        use clap::{CommandFactory, FromArgMatches};
        let argv = [
            "gr".to_string(),
            "--data".into(),
            data.to_string_lossy().into_owned(),
            "--items".into(),
            items.to_string_lossy().into_owned(),
            "--upstream".into(),
            upstream.to_string(),
        ];
        let bad =
            |e: clap::Error| crate::error::BenchError::Setup(format!("bench gr defaults: {e}"));
        let matches = GrDefaults::command()
            .try_get_matches_from(argv)
            .map_err(bad)?;
        Ok(GrDefaults::from_arg_matches(&matches).map_err(bad)?.gr)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::testbed::ModelKind;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        gr: GrArgs,
    }

    #[test]
    fn the_testbed_model_is_a_flag_and_kv_token_bytes_defaults_from_it() {
        let base = ["gr", "--data", "d", "--items", "i", "--testbed"];
        let a = Cli::parse_from(base.iter().chain(&["--testbed-model", "qwen2-1.5b-shape"])).gr;
        assert_eq!(a.testbed_model, ModelKind::Qwen2Shape);
        assert_eq!(a.kv_token_bytes, None, "resolved from the model by run()");
        assert_eq!(a.token_bytes(), crate::testbed::KV_TOKEN_BYTES);
        let given = Cli::parse_from(base.iter().chain(&["--kv-token-bytes", "1024"])).gr;
        assert_eq!(given.token_bytes(), 1024);
        assert!(Cli::try_parse_from(base.iter().chain(&["--testbed-model", "big"])).is_err());
    }
}
