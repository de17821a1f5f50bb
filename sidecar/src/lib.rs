//! recache: a drop-in OpenAI-compatible proxy in front of vLLM that makes generative
//! recommendation serving cheap.
//!
//! # Layout
//!
//! - [`config`]: `recache serve` settings from flags, `RECACHE_*` environment and a TOML file,
//!   resolved in that order of precedence into one [`config::Config`].
//! - [`server`]: the accept loop. [`server::run`] takes an already-bound listener (so tests bind
//!   `127.0.0.1:0`) and a shutdown future, and drains in-flight requests before returning.
//! - [`local`]: an in-process server on `127.0.0.1:0` for benchmarks and tests.
//! - [`service`]: routes one request: recache's own `/health`, `/ready`, `/metrics`, else proxy.
//! - [`proxy`]: forwarding to an upstream: body limits and validation, retries on connect
//!   failure, timeouts, and the streaming response body ([`proxy::stream`]).
//! - [`upstream`]: the replica set: health state, least-outstanding choice, in-flight guards;
//!   [`health`] probes replicas in the background and takes failed ones back.
//! - [`policy_slot`]: the eviction policy in use, swapped atomically; [`admin`] serves
//!   `GET`/`PUT /admin/eviction-policy` behind a bearer token.
//! - [`rank`]: GR ranking (`POST /v1/rank`, the `recache_rank` completions extension): prompt
//!   rewriting into user- or item-as-prefix layouts, prefix selection, label-token scoring.
//! - [`kvloop`]: the engine loop: KV-event mirror, shadow cache under the active policy, and
//!   the eviction order published to the engine shim (`--kv-events`, `--publish`).
//! - [`error`]: every error recache itself answers with, rendered in OpenAI's error shape.
//! - [`metrics`]: the Prometheus registry behind `/metrics`.
//! - [`bench`]: benchmark commands (`recache bench ...`) that print JSON. `recache sim` is the
//!   eviction crate's simulator (`recache_eviction::sim`), embedded as a subcommand.
//!
//! Engine specifics (routes, health path, request shapes) live in the `recache-adapters` crate.

pub mod admin;
pub mod bench;
pub mod config;
pub mod error;
pub mod health;
pub mod kvloop;
pub mod local;
pub mod metrics;
pub mod policy_slot;
pub mod proxy;
pub mod rank;
pub mod server;
pub mod service;
pub mod upstream;

/// The body type of every response recache sends.
pub type Body = http_body_util::combinators::BoxBody<bytes::Bytes, BoxError>;

/// Errors carried inside response bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
