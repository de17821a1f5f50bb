//! # recache-eviction
//!
//! The eviction engine of recache: which KV blocks of a prefix cache to drop,
//! classic and learning-augmented, plus a trace simulator to compare them.
//!
//! # Layout
//!
//! - [`index`]: the radix-tree block index (parent/child links, pins, O(log k)
//!   LRU order over evictable leaves, KV-event style insert/remove/clear with
//!   typed errors).
//! - [`policy`]: the [`EvictionPolicy`] trait, the serde [`PolicyConfig`]
//!   enum and the [`policy::build`] factory; one file per policy (LRU, LFU,
//!   SIEVE, FPB, HF, LARU, OPT).
//! - [`cache`]: index + policy under a capacity; runs the request protocol
//!   and refuses any victim that is not an evictable leaf.
//! - [`predict`]: next-access predictors (oracle with noise; online LightGBM
//!   behind the `lightgbm` feature) and their exportable counters.
//! - [`future`]: a trace's future (OPT and the oracle need it).
//! - [`trace`]: trace parsing (Mooncake JSONL).
//! - [`sim`]: the simulator and its clap arguments ([`sim::SimArgs`],
//!   [`sim::run`]), embedded by `recache sim`. Its `--plot` is drawn by the caller
//!   (the `recache-bench` crate), so this crate links no plotting library.
//! - `hash`: fast id hashing and seeded deterministic coins.

pub mod cache;
pub mod future;
pub mod hash;
pub mod index;
pub mod policy;
pub mod predict;
pub mod sim;
pub mod trace;

/// A KV block id (engine block hash, or a trace's hash id).
pub type BlockId = u64;

pub use cache::{Access, Cache, CacheError, Outcome};
pub use future::FutureIndex;
pub use index::{IndexError, LeafEvent, RadixIndex};
pub use policy::{EvictionPolicy, PolicyConfig, PolicyEnv, PolicyError, PolicyStats};
pub use predict::{Predictor, PredictorStats};
