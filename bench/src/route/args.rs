//! `recache bench route`'s command line.
//!
//! The replicas are either running ones (`--upstream`, with `--kv-events` and, for the item
//! pool's cold tier, the `--pool-store ADDR` they were started with) or the run's own
//! (`--testbed`: `--replicas` vLLM testbed engines named `route-r{i}`, each with `--kv-blocks`
//! blocks and, with `--pool-items`, an item pool of `--pool-bytes`; stopped when the run ends).
//! `--pool-store auto` also starts the store for the run (a Redis server,
//! [`super::store::RedisServer`]) and stops it after; it needs `--testbed`, since a replica's
//! store is fixed when it starts.

use std::path::PathBuf;

use recache_adapters::Engine;

use crate::error::BenchError;

/// `--pool-store`'s value that starts a store for the run.
pub const AUTO: &str = "auto";

#[derive(clap::Args, Debug)]
pub struct RouteArgs {
    /// Engine replicas (repeat), e.g. http://127.0.0.1:8000; not with --testbed, which
    /// starts its own
    #[arg(
        long = "upstream",
        required_unless_present = "testbed",
        conflicts_with = "testbed"
    )]
    pub upstream: Vec<String>,
    /// Each replica's KV-event publisher, in --upstream order: per-replica routing mirrors
    /// (checked by canaries); without them `prefix` runs on recache's record of what it sent
    /// (--testbed passes its engines' own)
    #[arg(long = "kv-events", conflicts_with = "testbed")]
    pub kv_events: Vec<String>,
    /// Start the replicas with the engine testbed (its `up` script, under --testbed-dir):
    /// --replicas vLLM engines named route-r0, route-r1, .. with --kv-blocks each (and an
    /// item pool of --pool-bytes with --pool-items, the --pool-store store with one),
    /// stopped when the run ends
    #[arg(long)]
    pub testbed: bool,
    /// Replicas --testbed starts (not with --upstream)
    #[arg(long, default_value_t = 2, conflicts_with = "upstream",
          value_parser = clap::value_parser!(u16).range(1..=16))]
    pub replicas: u16,
    /// Host bytes of each --testbed replica's item pool (with --pool-items; not with
    /// --upstream)
    #[arg(long, default_value_t = 100_000_000, conflicts_with = "upstream")]
    pub pool_bytes: u64,
    /// The testbed scripts' folder
    #[arg(long, default_value = crate::testbed::DIR)]
    pub testbed_dir: PathBuf,
    /// The model --testbed's replicas serve (`up --model`)
    #[arg(long, value_enum, env = crate::testbed::MODEL_ENV, default_value = "tiny")]
    pub testbed_model: crate::testbed::ModelKind,
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
    /// `examples/testbed/up --item-pool --pool-store ADDR`, or give --testbed, which does),
    /// or `auto` (with --testbed): a Redis server started for the run and stopped after.
    /// recache serves an item another replica's pool holds from it (`--rank-pool-store`);
    /// each strategy starts from an empty store (a Redis one is flushed with FLUSHDB, as the
    /// engines' caches are reset; a Mooncake one is not flushed: the row's `store_flushed`
    /// says which); rows gain `pool_bytes_per_replica`, `store_hit_rate` and the store's bytes
    #[arg(long, requires = "pool_items", value_name = "ADDR|auto")]
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

impl RouteArgs {
    /// The rules clap cannot state: `--pool-store auto` needs replicas this run starts.
    pub fn check(&self) -> Result<(), BenchError> {
        if self.pool_store.as_deref() == Some(AUTO) && !self.testbed {
            return Err(BenchError::Setup(format!(
                "--pool-store auto starts a store for the run, but a replica's store is fixed \
                 when it starts: give --testbed (the run starts its replicas with the store), \
                 or start a store and each replica with `{}` and pass --pool-store ADDR",
                crate::testbed::up_command("--item-pool --pool-store ADDR")
            )));
        }
        Ok(())
    }

    /// Whether this run starts the store (`--pool-store auto`).
    pub fn store_auto(&self) -> bool {
        self.pool_store.as_deref() == Some(AUTO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        route: RouteArgs,
    }

    fn parse(args: &[&str]) -> Result<RouteArgs, String> {
        let load = ["route", "--data", "d", "--items", "i"];
        Cli::try_parse_from(load.iter().chain(args))
            .map(|c| c.route)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn upstream_is_required_unless_testbed() {
        let err = parse(&[]).err().unwrap_or_default();
        assert!(err.contains("--upstream"), "{err}");
        let a = parse(&["--testbed"]).expect("--testbed alone");
        assert!(a.upstream.is_empty());
        assert_eq!((a.replicas, a.pool_bytes), (2, 100_000_000));
        let a = parse(&["--upstream", "http://a", "--upstream", "http://b"]).expect("ok");
        assert_eq!(a.upstream, ["http://a", "http://b"]);
        assert!(!a.testbed);
    }

    #[test]
    fn testbed_conflicts_with_running_replicas() {
        for given in [
            &["--upstream", "http://a"][..],
            &["--kv-events", "tcp://a"][..],
        ] {
            let args: Vec<&str> = ["--testbed"].iter().chain(given).copied().collect();
            let err = parse(&args).err().unwrap_or_default();
            assert!(err.contains("cannot be used with"), "{given:?}: {err}");
        }
        for testbed_only in [&["--replicas", "3"][..], &["--pool-bytes", "5"][..]] {
            let args: Vec<&str> = ["--upstream", "http://a"]
                .iter()
                .chain(testbed_only)
                .copied()
                .collect();
            let err = parse(&args).err().unwrap_or_default();
            assert!(
                err.contains("cannot be used with"),
                "{testbed_only:?}: {err}"
            );
        }
    }

    #[test]
    fn pool_store_auto_needs_testbed() {
        let a = parse(&[
            "--upstream",
            "http://a",
            "--pool-items",
            "10",
            "--pool-store",
            "auto",
        ])
        .expect("clap takes it");
        let err = a.check().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("give --testbed"), "{err}");
        assert!(err.contains("--pool-store ADDR"), "{err}");
        let a = parse(&["--testbed", "--pool-items", "10", "--pool-store", "auto"]).expect("ok");
        assert!(a.check().is_ok() && a.store_auto());
        let a = parse(&[
            "--upstream",
            "http://a",
            "--pool-items",
            "10",
            "--pool-store",
            "redis://127.0.0.1:6379",
        ])
        .expect("ok");
        assert!(a.check().is_ok() && !a.store_auto());
        let err = parse(&["--testbed", "--pool-store", "auto"]).err();
        assert!(err.is_some_and(|e| e.contains("--pool-items")));
    }
}
