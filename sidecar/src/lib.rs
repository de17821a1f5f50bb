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
//! - [`harness`]: everything the benchmarks (the `recache-bench` crate) use of this library,
//!   in one module.
//! - [`service`]: builds the server's parts once ([`service::AppState`]) and routes one
//!   request to the part that answers it; modules below it receive only what they use.
//! - [`proxy`]: forwarding a client's request: the request [`proxy::pipeline`] (parse once,
//!   rank extension, validation, priority, observation) and the streaming response body
//!   ([`proxy::stream`]).
//! - [`client`]: the one engine client: the replica set, where a request goes
//!   ([`client::route`]), retries, timeouts, health probes, one typed error.
//! - [`body`]: reading request bodies under `--max-body-bytes`; [`limits`]: header size and
//!   read time, requests in flight per client address.
//! - [`shutdown`]: background tasks owned by a guard that stops them.
//! - [`policy_slot`]: the eviction policy in use, swapped atomically; [`admin`] serves
//!   `GET`/`PUT /admin/eviction-policy` behind a bearer token.
//! - [`rank`]: GR ranking (`POST /v1/rank`, the `recache_rank` completions extension): prompt
//!   rewriting into user- or item-as-prefix layouts, prefix selection, label-token scoring.
//! - [`itempool`]: the item KV pool (`--rank-item-pool`): residency per replica, labels,
//!   admission, fills, precompute, adoption, the store's cold tier; ranking asks it what is
//!   resident where.
//! - [`retrieve`]: generative retrieval (`POST /v1/retrieve`, the `recache_retrieve`
//!   completions extension): a beam search constrained to the catalog's semantic IDs.
//! - [`engine`]: recache's own engine calls (JSON, `/tokenize`, the served model), the token
//!   cache, the request parts ranking and retrieval share, and the error they answer with.
//! - [`kvloop`]: the engine loop: KV-event mirror, shadow cache under the active policy, and
//!   the eviction order published to the engine shim (`--kv-events`, `--publish`).
//! - [`error`]: every error recache itself answers with, rendered in OpenAI's error shape.
//! - [`metrics`]: the Prometheus registry behind `/metrics`.
//!
//! The benchmarks (`recache bench ...`) and the offline retrieval-index builder (`recache items
//! index`) are the `recache-bench` crate and binary; the `recache` binary hands `bench` and
//! `items` to it. `recache sim` is the eviction crate's simulator
//! (`recache_eviction::sim`), embedded as a subcommand (its `--plot` is drawn by
//! `recache-bench`).
//!
//! Engine specifics (routes, health path, request shapes, prompt fields, priority routes,
//! uncached blocks) live in the `recache-adapters` crate, `Engine`'s methods.

pub mod admin;
pub mod body;
pub mod client;
pub mod config;
pub mod engine;
pub mod error;
pub mod harness;
pub mod itempool;
pub mod kvloop;
pub mod limits;
pub mod local;
pub mod metrics;
pub mod policy_slot;
pub mod proxy;
pub mod rank;
pub mod retrieve;
pub mod server;
pub mod service;
pub mod shutdown;
pub mod slo;

/// The body type of every response recache sends.
pub type Body = http_body_util::combinators::BoxBody<bytes::Bytes, BoxError>;

/// Errors carried inside response bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
