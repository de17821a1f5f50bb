//! Why a benchmark could not run ([`BenchError`]); its message is what the user sees.

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
    Predictor(#[from] crate::predictor::BenchError),
    #[error("sim: {0}")]
    Sim(#[from] recache_eviction::sim::SimError),
}

impl BenchError {
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| BenchError::Io { what, source }
    }
}
