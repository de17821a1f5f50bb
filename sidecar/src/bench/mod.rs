//! Benchmark commands (`recache bench ...`). Each prints its results as JSON on stdout and
//! progress on stderr; none of them is a timed test.

pub mod gr;
pub mod loadgen;
pub mod overhead;
pub mod static_upstream;

/// `recache bench` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCmd {
    /// Proxy overhead: a static-JSON upstream on loopback, loaded directly and through recache.
    Overhead(overhead::OverheadArgs),
    /// GR ranking on a real engine: recompute, UP, IP, cache-agnostic and BAT prefix selection.
    Gr(Box<gr::GrArgs>),
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
        }
    }
}
