//! Engine dialects for recache.
//!
//! # Layout
//!
//! - [`engine`]: which engine sits behind recache ([`Engine`]) and what its dialect looks like
//!   from the proxy's side (health probe path, metric names).
//! - [`openai`]: checks on the OpenAI-shaped request bodies that recache parses before it
//!   forwards them, so malformed requests are answered with a 400 instead of reaching the engine.
//! - [`vllm`], [`sglang`]: each engine's own names (routes, Prometheus metrics) and its
//!   scoring request; [`scoring`]: the engine-neutral scoring types.
//! - [`kv_events`]: KV cache events (vLLM's wire format, which SGLang shares) decoded into typed
//!   values, sequence tracking.
//! - `kv_subscriber` (feature `zmq`): the ZMQ SUB transport and the replay client.
//! - [`beam_plugin`]: the wire format of recache's vLLM endpoint plugin (retrieval's beam
//!   search in the engine's API server).
//! - [`order`]: the eviction-order file recache publishes for the engine-side shim.
//!
//! The proxy never re-serialises a body it validated: the engine receives the client's bytes.

pub mod beam_plugin;
pub mod engine;
pub mod kv_events;
#[cfg(feature = "zmq")]
pub mod kv_subscriber;
pub mod openai;
pub mod order;
pub mod pool;
pub mod prom;
pub mod scoring;
pub mod sglang;
pub mod vllm;

pub use engine::{CacheCounters, Engine, ResetOutcome};
pub use openai::{ValidationError, validate_body};
