//! recache's benchmarks: the `recache bench ...` commands, run by the `recache-bench` binary
//! (the `recache` binary hands `bench` to it). Each prints its results as JSON on stdout and
//! progress on stderr; none of them is a timed test. Of the serving crate they use only
//! `recache::harness` (checked by `tests/module_graph.rs`, with this crate's module DAG).
//!
//! # Layout
//!
//! - One module per benchmark: [`overhead`] (with [`loadgen`], [`wrk`], [`static_upstream`]),
//!   [`peers`] (recache beside sglang-router and vllm-router), [`gr`], [`quality`], [`replay`],
//!   [`retrieve`], [`route`], [`slo`], [`soak`], [`synth`], [`predictor`], [`costfit`] (where
//!   a prefill's time goes); [`sim_plot`] draws `recache sim --plot`; [`curve`] draws the
//!   recompute curve from `quality` and `gr` rows already measured.
//! - What they share: [`http`] (the client, scrapes, engine calls), [`engine_ops`] (engine
//!   specifics: cache reset, counters), [`snapshot`] (the engines' counters around a run,
//!   settled, with [`own_traffic`]: recache's own calls taken out), [`open_loop`] (requests released at their planned
//!   arrival, latency counted from it), [`stats`] (quantiles, spreads), [`rng`] (the seeded
//!   PRNG of every workload), [`plot`] (every PNG), [`testbed`] (the one place that knows
//!   `examples/testbed`), [`recache_bin`] (the `recache` binary beside this one), [`error`].
//! - [`tracegen`]: deterministic trace generators for `recache sim` (`examples/gen_trace`).
//! - [`items`]: `recache items index`, the offline retrieval-index builder (the `recache`
//!   binary hands `items` over as it does `bench`).

pub mod costfit;
pub mod cpu;
pub mod curve;
pub mod engine_ops;
pub mod error;
pub mod gr;
pub mod http;
pub mod items;
pub mod loadgen;
pub mod open_loop;
pub mod overhead;
pub mod own_traffic;
pub mod peers;
pub mod plot;
pub mod predictor;
pub mod progress;
pub mod quality;
pub mod recache_bin;
pub mod replay;
pub mod retrieve;
pub mod rng;
pub mod route;
pub mod sim_plot;
pub mod slo;
pub mod snapshot;
pub mod soak;
pub mod static_upstream;
pub mod stats;
pub mod synth;
pub mod testbed;
pub mod tracegen;
pub mod wrk;

pub use error::BenchError;

/// `recache bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCmd {
    /// Proxy overhead: a static-JSON upstream on loopback, loaded directly and through recache.
    Overhead(overhead::OverheadArgs),
    /// recache side by side with the gateways teams run today (sglang-router, vllm-router,
    /// installed pinned from PyPI) on the same replicas and arrivals: overhead, a
    /// conversation trace, faults.
    Peers(Box<peers::PeersArgs>),
    /// GR ranking on a real engine: recompute, UP, IP, cache-agnostic and BAT prefix selection.
    Gr(Box<gr::GrArgs>),
    /// Ranking quality per layout on a real engine: held-out users' next items through
    /// `/v1/rank` (Recall@5/10, MRR@10, NDCG@5/10) for UP, IP, IP with the item pool, bat and
    /// bat-pool, next to popularity and random baselines.
    Quality(Box<quality::QualityArgs>),
    /// Eviction on a real engine: a Mooncake trace replayed through recache per policy
    /// (native vLLM LRU, or a policy steered via the shim); engine vs simulated hit rate.
    Replay(Box<replay::ReplayArgs>),
    /// Generative retrieval on a real engine: `/v1/retrieve` per beam width (latency, engine
    /// tokens computed vs one greedy decode, cached share) and an unconstrained beam search's
    /// invalid-item rate on the same prompts.
    Retrieve(Box<retrieve::RetrieveBenchArgs>),
    /// Routing strategies side by side on real replicas: engine hit rate, rps, latency,
    /// per-replica share and decision time per strategy.
    Route(Box<route::RouteArgs>),
    /// Does recache hold over time: mixed proxy, streaming and rank load through a `recache
    /// serve` child with eviction-policy hot-swaps; RSS, fds, errors and p99 per minute.
    Soak(soak::SoakArgs),
    /// Serving to a deadline: plain proxy vs `--slo on` under open-loop GR ranking load at
    /// multiples of the engine's saturation rate; goodput, SLO attainment, p99, refusals.
    Slo(Box<slo::SloArgs>),
    /// Recall@10, NDCG@10, throughput and computed tokens against the link-token count K of
    /// `--rank-pool-recompute`, from `bench quality` and `bench gr` rows already measured.
    RecomputeCurve(curve::CurveArgs),
    /// A synthetic `bench gr` data set (Zipf item popularity, long-tailed histories) in the
    /// shared Amazon data's formats; prints a one-line JSON summary.
    Synth(synth::SynthArgs),
    /// Eviction predictor: LightGBM train time for 20k rows and batch predict time for 25k rows,
    /// on feature rows built from a Mooncake-format trace; then, per feature set, ranking quality
    /// against OPT's decisions (held-out AUC) and the FPB/LARU hit ratios it buys.
    Predictor(predictor::PredictorArgs),
    /// Where a vLLM prefill's time goes: fresh prompts, prompts after a cached prefix and
    /// bat-pool prompts after pooled items, one at a time, timed by vLLM's own prefill clock;
    /// fits time ≈ a·tokens + b·pairs + c and compares b/a with the model's FLOP ratio.
    Costfit(Box<costfit::CostfitArgs>),
    /// `recache sim` with `--plot`: the simulator of the eviction crate, and its PNG (the
    /// `recache` binary runs `sim` itself and hands it over only to draw).
    #[command(hide = true)]
    Sim(recache_eviction::sim::SimArgs),
}

impl BenchCmd {
    pub async fn run(self) -> Result<(), BenchError> {
        match self {
            BenchCmd::Overhead(args) => overhead::run(args).await,
            BenchCmd::Peers(args) => peers::run(*args).await,
            BenchCmd::Gr(args) => gr::run(*args).await,
            BenchCmd::Quality(args) => quality::run(*args).await,
            BenchCmd::Replay(args) => replay::run(*args).await,
            BenchCmd::Route(args) => route::run(*args).await,
            BenchCmd::Retrieve(args) => retrieve::run(*args).await,
            BenchCmd::Soak(args) => soak::run(args).await,
            BenchCmd::Slo(args) => slo::run(*args).await,
            BenchCmd::Costfit(args) => costfit::run(*args).await,
            BenchCmd::RecomputeCurve(args) => curve::run(args).await,
            BenchCmd::Synth(args) => tokio::task::block_in_place(|| synth::run(args)),
            BenchCmd::Predictor(args) => {
                // CPU-bound: keep it off the runtime's worker threads.
                tokio::task::spawn_blocking(move || predictor::run(&args))
                    .await
                    .map_err(|e| {
                        BenchError::Setup(format!("predictor benchmark panicked: {e}"))
                    })??;
                Ok(())
            }
            BenchCmd::Sim(args) => {
                let draw: recache_eviction::sim::Plotter<'_> = &sim_plot::draw;
                tokio::task::block_in_place(|| recache_eviction::sim::run(&args, Some(draw)))?;
                Ok(())
            }
        }
    }
}
