//! Why the predictor benchmark could not run.

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("predictor benchmark needs the `lightgbm` feature")]
    Unavailable,
    #[error("training failed: {0}")]
    Train(String),
    #[error("not enough rows: got {got}, need {need}")]
    TooFewRows { got: usize, need: usize },
    #[error("trace")]
    Trace(#[from] recache_eviction::trace::TraceError),
    #[error("replay")]
    Cache(#[from] recache_eviction::cache::CacheError),
    #[error("simulation")]
    Sim(#[source] Box<recache_eviction::sim::SimError>),
    #[error("bad argument: {0}")]
    BadArg(String),
    #[error("cannot write the report")]
    Output(#[source] std::io::Error),
}
