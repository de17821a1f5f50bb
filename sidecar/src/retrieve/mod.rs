//! Generative retrieval: `POST /v1/retrieve` and the `recache_retrieve` extension of
//! `/v1/completions`. The model generates the next item as its semantic ID (a short code of
//! tokens); recache runs a beam search over the codes through the engine, every step
//! constrained to the catalog's prefix trie, so every answer is a real item.
//!
//! - [`index`]: the index file (`recache items index`, the benchmark crate's offline builder,
//!   writes it) and its trie.
//! - [`config`]: `--retrieve-*` settings.
//! - [`api`]: request/response shapes and validation (400s naming the field).
//! - [`search`]: the constrained beam search with early stopping; [`topk`]: where its
//!   per-step top-k runs (CUDA kernel on a GPU, else its CPU reference).
//! - [`engine`]: prompt, one scoring call per step, vocabulary check; [`in_engine`]: the
//!   whole search inside vLLM (recache's endpoint plugin) where the replicas run it.
//! - [`handler`]: `/v1/retrieve` and the completions extension.
//! - [`metrics`]: searches, engine calls, tokens, pruning.

pub mod api;
pub mod config;
pub mod engine;
pub mod handler;
pub mod in_engine;
pub mod index;
pub mod metrics;
pub mod search;
#[cfg(test)]
mod tests;
pub mod topk;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::client::EngineClient;

/// Everything retrieval uses: its settings and index, the engine client, its metrics.
pub struct Retriever {
    pub config: config::RetrieveConfig,
    pub client: Arc<EngineClient>,
    pub engine: recache_adapters::Engine,
    pub metrics: metrics::RetrieveMetrics,
    pub max_body_bytes: usize,
    pub in_engine: in_engine::InEngine,
    /// The engine accepted the index's highest code token (asked once, on first use).
    vocab_fits: AtomicBool,
}

impl Retriever {
    pub fn new(
        config: config::RetrieveConfig,
        client: Arc<EngineClient>,
        engine: recache_adapters::Engine,
        max_body_bytes: usize,
        registry: &crate::metrics::Metrics,
    ) -> Result<Self, prometheus::Error> {
        Ok(Self {
            in_engine: in_engine::InEngine::new(config.in_engine, &config.index),
            config,
            client,
            engine,
            metrics: metrics::RetrieveMetrics::new(registry)?,
            max_body_bytes,
            vocab_fits: AtomicBool::new(false),
        })
    }

    /// Checks the index's code tokens against the served model until the engine has said
    /// they fit; a refusal is answered (500, naming the fix) rather than a wrong search.
    pub async fn check_vocab(&self, model: Option<&str>) -> Result<(), crate::engine::EngineError> {
        if self.vocab_fits.load(Ordering::Relaxed) {
            return Ok(());
        }
        let highest = self.config.index.highest_token;
        engine::check_vocab(&self.client, self.engine, model, highest).await?;
        self.vocab_fits.store(true, Ordering::Relaxed);
        Ok(())
    }
}
