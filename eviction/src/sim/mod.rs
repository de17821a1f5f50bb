//! The trace simulator and its command-line arguments (CONTRACT: `recache
//! sim` embeds [`SimArgs`] and calls [`run`]).
//!
//! Semantics: requests in file order, request i at time i; a request's hits
//! are the longest leading run of its blocks that are resident on arrival,
//! summed over its chains (a GR request's `segments` may split it into
//! several chains from the tree root; a plain request is one chain); then all
//! its blocks become resident (accessed at time i), evicting as the policy
//! says; the request's own blocks are never victims. Capacity is a fraction
//! of the trace's distinct blocks (floored) or `--capacity-blocks`.
//!
//! `--plot` is drawn by a [`Plotter`] the caller passes: this crate links no plotting library
//! (the serving binary embeds the simulator; `recache-bench` draws the PNG).

mod args;
pub mod predictor;
mod report;
mod runner;

use std::path::PathBuf;

pub use args::{PredictorKind, SimArgs, TraceFormat};
pub use report::SimRow;
pub use runner::{Plotter, Run, simulate};

use crate::policy::PolicyError;
use crate::trace::TraceError;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("trace")]
    Trace(#[from] TraceError),
    #[error("policy")]
    Policy(#[from] PolicyError),
    #[error("simulation of {policy} failed")]
    Cache {
        policy: String,
        #[source]
        source: crate::cache::CacheError,
    },
    #[error("bad argument: {0}")]
    BadArg(String),
    #[error("predictor {0} is not available in this build (enable the `lightgbm` feature)")]
    PredictorUnavailable(&'static str),
    #[error("cannot write {path}: {msg}")]
    Plot { path: PathBuf, msg: String },
    #[error(
        "--plot {0}: this build of the simulator draws no plots (`recache sim --plot` draws \
         with the recache-bench binary)"
    )]
    NoPlotter(PathBuf),
    #[error("cannot write results")]
    Output(#[source] std::io::Error),
}

pub use runner::run;
