//! The engine loop (issue 5): a live mirror of vLLM's prefix cache from its KV events, a
//! shadow cache running the active eviction policy over the prompts the proxy forwards, and
//! the eviction order published for the engine-side shim (`shim/python/recache_shim/
//! eviction.py`), which makes vLLM evict what the policy would.
//!
//! - [`config`]: `--kv-events`, `--kv-replay`, `--publish`, `--kv-engine-blocks`.
//! - [`blocks`]: content ids of token blocks (prompts and events meet on them).
//! - [`mirror`]: the engine's cache, exactly, from events; [`resident`]: its snapshot for the
//!   request path (lock-free reads).
//! - [`shadow`]: the policy's cache over the request stream; its victims.
//! - [`worker`]: the thread that ties them together; [`publish`]: the order file.
//! - [`metrics`]: Prometheus counters and gauges.
//! - [`priority`]: `--sglang-priority`, the policy's view as SGLang request priorities.
//!
//! Nothing here is on the request path: [`KvLoopHandle::observe`] only enqueues.

pub mod blocks;
pub mod config;
pub mod metrics;
pub mod mirror;
pub mod priority;
pub mod publish;
pub mod resident;
pub mod shadow;
pub mod worker;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Weak};

use recache_adapters::kv_subscriber::{self, SubscriberConfig};

use self::config::KvLoopConfig;
pub use self::metrics::LoopMetrics;
use self::priority::PrioritySource;
use self::resident::Resident;
use self::worker::{Msg, Worker};

/// Arrivals allowed to queue before new ones are dropped (the loop is behind).
const MAX_PENDING_ARRIVALS: usize = 4096;

/// The proxy's side of the loop.
pub struct KvLoopHandle {
    tx: Sender<Msg>,
    pending: Arc<AtomicUsize>,
    metrics: LoopMetrics,
    resident: Arc<Resident>,
    /// Set with `--sglang-priority`.
    priority: Option<Arc<PrioritySource>>,
}

impl KvLoopHandle {
    /// Starts the subscriber task and the worker thread. Needs a tokio runtime.
    pub fn start(
        cfg: KvLoopConfig,
        metrics: LoopMetrics,
        state: Weak<crate::service::AppState>,
    ) -> Self {
        let (tx, rx) = channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let priority = cfg
            .sglang_priority
            .then(|| PrioritySource::new(cfg.block_size));
        let resident = Arc::new(Resident::new(cfg.block_size));
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, "engine loop needs a tokio runtime; loop off");
                return Self {
                    tx,
                    pending,
                    metrics,
                    resident,
                    priority: None,
                };
            }
        };
        let sub_tx = tx.clone();
        runtime.spawn(kv_subscriber::run(
            SubscriberConfig::new(cfg.kv_events.clone()),
            move |inc| sub_tx.send(Msg::Sub(inc)).is_ok(),
        ));
        let worker = Worker {
            cfg,
            metrics: metrics.clone(),
            policy: Box::new(move || state.upgrade().map(|s| s.policy.load())),
            pending_arrivals: pending.clone(),
            runtime,
            resident: resident.clone(),
            priority: priority.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("recache-kvloop".into())
            .spawn(move || worker.run(rx));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the engine loop thread; loop off");
        }
        Self {
            tx,
            pending,
            metrics,
            resident,
            priority,
        }
    }

    /// With `--sglang-priority`: the body to forward instead of the client's, with `priority`
    /// set from the policy's view (None: forward unchanged). One lock-free read, no waiting.
    pub fn steer(&self, path: &str, body: &[u8]) -> Option<bytes::Bytes> {
        self.priority.as_ref()?.steer(path, body)
    }

    /// What the engine caches now, for the request path (lock-free; None while the engine's
    /// events are not received).
    pub fn resident(&self) -> Option<Arc<resident::Snapshot>> {
        self.resident.view()
    }

    /// The mirror's answer for a prompt: (leading full blocks the engine holds, blocks in the
    /// mirror). None if the loop is not running. For tests and diagnostics.
    pub fn cached_prefix(&self, tokens: Vec<u32>) -> Option<(usize, usize)> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.tx.send(Msg::Query(tokens, tx)).ok()?;
        rx.recv_timeout(std::time::Duration::from_secs(5)).ok()
    }

    /// Hands a forwarded request's token-id prompt(s) to the loop (`prompt` on completions,
    /// `input_ids` on SGLang's `/generate`); text prompts are skipped (their token ids are the
    /// engine's business). Never blocks.
    pub fn observe(&self, path: &str, body: &[u8]) {
        let prompts = match path {
            recache_adapters::openai::COMPLETIONS => token_prompts(body),
            priority::GENERATE => generate_prompts(body),
            _ => return,
        };
        for tokens in prompts {
            self.observe_tokens(tokens);
        }
    }

    /// Hands one prompt to the loop as the shadow cache should see it: the whole prompt, or
    /// only the part recache wants kept (a GR request's admitted part). What the shadow never
    /// sees is what the engine is told to evict first. Never blocks.
    pub fn observe_tokens(&self, tokens: Vec<u32>) {
        if self.pending.fetch_add(1, Ordering::Relaxed) >= MAX_PENDING_ARRIVALS {
            self.pending.fetch_sub(1, Ordering::Relaxed);
            self.metrics.arrivals_dropped.inc();
            return;
        }
        if self.tx.send(Msg::Arrival(tokens)).is_err() {
            self.pending.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum PromptField {
    One(Vec<u32>),
    Many(Vec<Vec<u32>>),
    Other(serde::de::IgnoredAny),
}

#[derive(serde::Deserialize)]
struct PromptOnly {
    prompt: PromptField,
}

#[derive(serde::Deserialize)]
struct InputIdsOnly {
    input_ids: PromptField,
}

/// The token-id prompts of an SGLang `/generate` body (none for text).
pub fn generate_prompts(body: &[u8]) -> Vec<Vec<u32>> {
    match serde_json::from_slice::<InputIdsOnly>(body).map(|p| p.input_ids) {
        Ok(PromptField::One(t)) => vec![t],
        Ok(PromptField::Many(ts)) => ts,
        _ => Vec::new(),
    }
}

/// The token-id prompts of a completions body (none for text prompts).
pub fn token_prompts(body: &[u8]) -> Vec<Vec<u32>> {
    match serde_json::from_slice::<PromptOnly>(body).map(|p| p.prompt) {
        Ok(PromptField::One(t)) => vec![t],
        Ok(PromptField::Many(ts)) => ts,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn token_prompts_reads_ids_and_skips_text() {
        assert_eq!(
            super::token_prompts(br#"{"prompt":[1,2],"x":1}"#),
            vec![vec![1, 2]]
        );
        assert_eq!(super::token_prompts(br#"{"prompt":[[1],[2]]}"#).len(), 2);
        assert!(super::token_prompts(br#"{"prompt":"hi"}"#).is_empty());
        assert!(super::token_prompts(b"{").is_empty());
        assert_eq!(
            super::generate_prompts(br#"{"input_ids":[[1,2],[3]]}"#),
            vec![vec![1, 2], vec![3]]
        );
        assert!(super::generate_prompts(br#"{"text":"hi"}"#).is_empty());
    }
}
