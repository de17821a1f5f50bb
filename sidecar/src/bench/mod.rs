//! Benchmark commands (`recache bench ...`). Each prints its results as JSON on stdout and
//! progress on stderr; none of them is a timed test.

pub mod engine_ops;
pub mod gr;
pub mod loadgen;
pub mod overhead;
pub mod quality;
pub mod replay;
pub mod retrieve;
pub mod route;
pub mod slo;
pub mod soak;
pub mod static_upstream;
pub mod synth;
pub mod wrk;

/// The benchmarks' own plain HTTP/1 client: load generation against a URL (recache or an
/// engine, whichever a mode measures) and scrapes. Calls recache itself makes to engines go
/// through `crate::client::EngineClient`; a benchmark must be able to bypass it.
pub type HttpClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
>;

/// `recache bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCmd {
    /// Proxy overhead: a static-JSON upstream on loopback, loaded directly and through recache.
    Overhead(overhead::OverheadArgs),
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
    /// A synthetic `bench gr` data set (Zipf item popularity, long-tailed histories) in the
    /// shared Amazon data's formats; prints a one-line JSON summary.
    Synth(synth::SynthArgs),
    /// Eviction predictor: LightGBM train time for 20k rows and batch predict time for 25k rows,
    /// on feature rows built from a Mooncake-format trace; then, per feature set, ranking quality
    /// against OPT's decisions (held-out AUC) and the FPB/LARU hit ratios it buys.
    Predictor(recache_eviction::bench::PredictorArgs),
}

/// A benchmark that could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Setup(String),
    #[error("predictor benchmark: {0}")]
    Predictor(#[from] recache_eviction::bench::BenchError),
}

impl BenchError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| BenchError::Io { what, source }
    }
}

impl BenchCmd {
    pub async fn run(self) -> Result<(), BenchError> {
        match self {
            BenchCmd::Overhead(args) => overhead::run(args).await,
            BenchCmd::Gr(args) => gr::run(*args).await,
            BenchCmd::Quality(args) => quality::run(*args).await,
            BenchCmd::Replay(args) => replay::run(*args).await,
            BenchCmd::Route(args) => route::run(*args).await,
            BenchCmd::Retrieve(args) => retrieve::run(*args).await,
            BenchCmd::Soak(args) => soak::run(args).await,
            BenchCmd::Slo(args) => slo::run(*args).await,
            BenchCmd::Synth(args) => tokio::task::block_in_place(|| synth::run(args)),
            BenchCmd::Predictor(args) => {
                // CPU-bound: keep it off the runtime's worker threads.
                tokio::task::spawn_blocking(move || recache_eviction::bench::run(&args))
                    .await
                    .map_err(|e| {
                        BenchError::Setup(format!("predictor benchmark panicked: {e}"))
                    })??;
                Ok(())
            }
        }
    }
}
