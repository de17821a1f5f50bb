//! The engine loop: a live mirror of vLLM's prefix cache from its KV events, a
//! shadow cache running the active eviction policy over the prompts the proxy forwards, and
//! the eviction order published for the engine-side shim (`shim/python/recache_shim/
//! eviction.py`), which makes vLLM evict what the policy would.
//!
//! - [`config`]: `--kv-events`, `--kv-replay`, `--publish`, `--kv-engine-blocks`.
//! - Content ids of token blocks (prompts and events meet on them) are
//!   [`recache_hash::blocks`]'.
//! - [`mirror`]: the engine's cache, exactly, from events; [`resident`]: its snapshot for the
//!   request path (lock-free reads).
//! - [`shadow`]: the policy's cache over the request stream; its victims.
//! - [`worker`]: the thread that ties them together; [`publish`]: the order file.
//! - [`metrics`]: Prometheus counters and gauges.
//! - [`priority`]: `--sglang-priority`, the policy's view as SGLang request priorities.
//!
//! Nothing here is on the request path: [`KvLoopHandle::observe`] only enqueues.

pub mod config;
pub mod metrics;
pub mod mirror;
pub mod priority;
pub mod publish;
pub mod resident;
pub mod shadow;
pub mod shim_status;
pub mod worker;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};

use recache_adapters::Engine;
use recache_adapters::kv_subscriber::{self, SubscriberConfig};

use self::config::KvLoopConfig;
pub use self::metrics::LoopMetrics;
use self::priority::PrioritySource;
use self::resident::Resident;
use self::worker::{Msg, Worker};
use crate::policy_slot::PolicySlot;
use crate::shutdown::TaskGuard;

/// Arrivals allowed to queue before new ones are dropped (the loop is behind).
const MAX_PENDING_ARRIVALS: usize = 4096;

/// The proxy's side of the loop. Dropping it stops the event subscriber, and with it the
/// worker thread (its channel closes).
pub struct KvLoopHandle {
    tx: Sender<Msg>,
    pending: Arc<AtomicUsize>,
    metrics: LoopMetrics,
    resident: Arc<Resident>,
    /// Set with `--sglang-priority`: the priority view and the routes that take one.
    priority: Option<(Arc<PrioritySource>, &'static [&'static str])>,
    _subscriber: Option<TaskGuard>,
}

impl KvLoopHandle {
    /// Starts the subscriber task and the worker thread. Needs a tokio runtime.
    pub fn start(
        cfg: KvLoopConfig,
        metrics: LoopMetrics,
        policy: Arc<PolicySlot>,
        engine: Engine,
    ) -> Self {
        let (tx, rx) = channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let priority = cfg
            .sglang_priority
            .then(|| PrioritySource::new(cfg.block_size));
        let resident = Arc::new(Resident::new(cfg.block_size));
        let mut handle = Self {
            tx: tx.clone(),
            pending: pending.clone(),
            metrics: metrics.clone(),
            resident: resident.clone(),
            priority: None,
            _subscriber: None,
        };
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(h) => h,
            Err(e) => {
                tracing::error!(error = %e, "engine loop needs a tokio runtime; loop off");
                return handle;
            }
        };
        let sub_cfg = SubscriberConfig::new(cfg.kv_events.clone());
        handle._subscriber = Some(TaskGuard::spawn(move |mut stop| async move {
            tokio::select! {
                () = kv_subscriber::run(sub_cfg, move |inc| tx.send(Msg::Sub(inc)).is_ok()) => {}
                _ = stop.changed() => {}
            }
        }));
        let worker = Worker {
            cfg,
            metrics,
            policy,
            uncached_blocks: engine.uncached_blocks(),
            pending_arrivals: pending,
            runtime,
            resident,
            priority: priority.clone(),
        };
        let spawned = std::thread::Builder::new()
            .name("recache-kvloop".into())
            .spawn(move || worker.run(rx));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the engine loop thread; loop off");
        }
        handle.priority = priority.map(|p| (p, engine.priority_paths()));
        handle
    }

    /// With `--sglang-priority`, on a route that takes one: the `priority` to set for a request
    /// with these token-id prompts (the policy's view of them). One lock-free read.
    pub fn priority(&self, path: &str, prompts: &[Vec<u32>]) -> Option<i64> {
        let (source, paths) = self.priority.as_ref()?;
        paths.contains(&path).then(|| source.priority(prompts))
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

    /// Hands a forwarded request's token-id prompts to the loop (text prompts have none: their
    /// token ids are the engine's business). Never blocks.
    pub fn observe(&self, prompts: Vec<Vec<u32>>) {
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
