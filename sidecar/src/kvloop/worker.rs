//! The engine loop's thread: applies KV events to the mirror in sequence order (resyncing on
//! gaps and engine restarts), feeds request arrivals to the shadow cache, rebuilds the shadow
//! when the admin API swaps the policy, and publishes the eviction order. Runs off the request
//! path; the proxy only enqueues.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use recache_adapters::kv_events::{KvBatch, KvEvent, SeqCheck, SeqTracker};
use recache_adapters::kv_subscriber::Incoming;

use super::config::KvLoopConfig;
use super::metrics::{LoopMetrics, Phase};
use super::mirror::Mirror;
use super::priority::{PrioritySource, View};
use super::publish;
use super::resident::Resident;
use super::shadow::Shadow;
use crate::policy_slot::{ActivePolicy, PolicySlot};

/// How often the shim's status beside the order is read (it writes at most once a second).
const SHIM_STATUS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How soon a change the engine's events alone made is published. Events change the order
/// little: the blocks a request stores are the ones its arrival (published at once) admitted,
/// and a listed block the engine evicted meanwhile is one it no longer has. Each publish
/// costs a ranking here and a re-read in the engine. Most publishes follow arrivals, so this
/// saved little where measured (the loop's publish time per 1,000 Mooncake requests at
/// concurrency 4: 3.6 s before, 3.3-3.4 s after; docs/history.md, steering inside vLLM).
const EVENTS_PUBLISH_GAP: Duration = Duration::from_millis(50);

/// What the worker receives.
pub enum Msg {
    Sub(Incoming),
    /// A token-id prompt the proxy forwarded.
    Arrival(Vec<u32>),
    /// How many leading full blocks of this prompt the engine holds, and the mirror's size.
    Query(Vec<u32>, std::sync::mpsc::Sender<(usize, usize)>),
}

pub struct Worker {
    pub cfg: KvLoopConfig,
    pub metrics: LoopMetrics,
    /// The active policy; a new generation means rebuild the shadow.
    pub policy: Arc<PolicySlot>,
    /// Blocks of the engine cache that never hold a cached block (the engine's dialect).
    pub uncached_blocks: usize,
    pub pending_arrivals: Arc<AtomicUsize>,
    pub runtime: tokio::runtime::Handle,
    /// The request path's view of the mirror, republished after events change it.
    pub resident: Arc<Resident>,
    /// `--sglang-priority`: the shadow's contents for the request path.
    pub priority: Option<Arc<PrioritySource>>,
}

struct State {
    mirror: Mirror,
    shadow: Shadow,
    seq: SeqTracker,
    active: Arc<ActivePolicy>,
    published: u64,
    last_publish: Instant,
    /// An arrival, a reset or a swap changed what the policy keeps: publish now, before the
    /// engine allocates for that request.
    dirty: bool,
    /// Only the engine's events changed the mirror since the last publish: publish within
    /// [`EVENTS_PUBLISH_GAP`] (each publish costs a ranking here and a re-read in the engine).
    events_since_publish: bool,
    /// The mirror changed since the resident view was last published.
    mirror_changed: bool,
    /// Blocks the shadow has admitted since start (never reset: the priority epoch must only
    /// grow, as SGLang only ever raises a node's priority).
    admitted: u64,
    /// The shadow changed since the priority view was last published.
    shadow_changed: bool,
    /// When the shim's status was last read, and the state it gave.
    shim_read: Option<Instant>,
    shim_state: Option<super::shim_status::ShimState>,
}

impl Worker {
    pub fn run(self, rx: Receiver<Msg>) {
        let active = self.policy.load();
        let capacity = self
            .cfg
            .engine_blocks
            .saturating_sub(self.uncached_blocks)
            .max(1);
        let shadow = match Shadow::new(&active.config, capacity, self.cfg.block_size) {
            Ok(s) => s.in_flight(self.cfg.shadow_in_flight),
            Err(e) => {
                tracing::error!(error = %e, "engine loop: cannot build the eviction policy; loop off");
                return;
            }
        };
        self.metrics
            .engine_blocks
            .set(self.cfg.engine_blocks as i64);
        let mut st = State {
            mirror: Mirror::new(),
            shadow,
            seq: SeqTracker::new(),
            active,
            published: 0,
            last_publish: Instant::now(),
            dirty: true,
            events_since_publish: false,
            mirror_changed: true,
            shim_read: None,
            shim_state: None,
            admitted: 0,
            shadow_changed: true,
        };
        loop {
            // Wake for the next publish due: events waiting, else the periodic refresh.
            let due = if st.events_since_publish {
                EVENTS_PUBLISH_GAP
            } else {
                self.cfg.refresh
            };
            let wait = due.saturating_sub(st.last_publish.elapsed());
            match rx.recv_timeout(wait.max(Duration::from_millis(1))) {
                Ok(msg) => {
                    self.timed(&mut st, msg);
                    // Drain what queued meanwhile before publishing once.
                    while let Ok(msg) = rx.try_recv() {
                        self.timed(&mut st, msg);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if st.mirror_changed {
                st.mirror_changed = false;
                self.resident.publish(st.mirror.content_ids());
            }
            if let Some(p) = self.priority.as_ref().filter(|_| st.shadow_changed) {
                st.shadow_changed = false;
                p.publish(View {
                    kept: st.shadow.kept(),
                    epoch: st.admitted / capacity as u64,
                });
            }
            let now = self.policy.load();
            if now.generation != st.active.generation {
                match st.shadow.rebuild(&now.config) {
                    Ok(()) => {
                        tracing::info!(policy = now.config.name(), "engine loop: policy swapped")
                    }
                    Err(e) => tracing::error!(error = %e, "engine loop: policy rebuild failed"),
                }
                st.active = now;
                st.dirty = true;
                st.shadow_changed = true;
            }
            let since = st.last_publish.elapsed();
            if st.dirty
                || (st.events_since_publish && since >= EVENTS_PUBLISH_GAP)
                || since >= self.cfg.refresh
            {
                let t = Instant::now();
                self.publish(&mut st);
                self.metrics.busy(Phase::Publish, t.elapsed());
            }
        }
    }

    /// [`Self::handle`], its time counted by what the message was (the loop's own cost).
    fn timed(&self, st: &mut State, msg: Msg) {
        let phase = match &msg {
            Msg::Arrival(_) => Phase::Arrivals,
            Msg::Query(..) => Phase::Queries,
            Msg::Sub(_) => Phase::Events,
        };
        let t = Instant::now();
        self.handle(st, msg);
        self.metrics.busy(phase, t.elapsed());
    }

    fn handle(&self, st: &mut State, msg: Msg) {
        match msg {
            Msg::Arrival(tokens) => {
                self.pending_arrivals.fetch_sub(1, Ordering::Relaxed);
                let ids = recache_hash::blocks::prompt_ids(&tokens, self.cfg.block_size);
                self.metrics.arrivals.inc();
                self.metrics.shadow_blocks.inc_by(ids.len() as u64);
                let n = ids.len();
                match st.shadow.request(ids) {
                    Ok(hits) => {
                        self.metrics.shadow_hit_blocks.inc_by(hits as u64);
                        st.admitted += n.saturating_sub(hits) as u64;
                    }
                    Err(e) => tracing::warn!(error = %e, "engine loop: shadow cache error"),
                }
                st.dirty = true;
                st.shadow_changed = true;
            }
            Msg::Query(tokens, reply) => {
                let ids = recache_hash::blocks::prompt_ids(&tokens, self.cfg.block_size);
                let _ = reply.send((st.mirror.cached_prefix(&ids), st.mirror.len()));
            }
            Msg::Sub(Incoming::Connected) => {
                tracing::info!(endpoint = %self.cfg.kv_events, "engine loop: subscribed to KV events");
                self.metrics.connected.set(1);
                self.resident.set_live(true);
            }
            Msg::Sub(Incoming::Disconnected) => {
                tracing::warn!(endpoint = %self.cfg.kv_events, "engine loop: KV event publisher unreachable");
                self.metrics.connected.set(0);
                self.resident.set_live(false);
            }
            Msg::Sub(Incoming::Malformed(e)) => {
                self.metrics.decode_errors.inc();
                tracing::warn!(error = %e, "engine loop: undecodable KV event message skipped");
            }
            Msg::Sub(Incoming::Batch(b)) => self.batch(st, b),
        }
    }

    fn batch(&self, st: &mut State, b: KvBatch) {
        match st.seq.check(b.seq) {
            SeqCheck::InOrder => {}
            SeqCheck::Duplicate => return,
            SeqCheck::Gap { expected, got } => {
                tracing::warn!(expected, got, "engine loop: KV event gap");
                let replayed = self.cfg.kv_replay.as_deref().and_then(|ep| {
                    let r = self
                        .runtime
                        .block_on(recache_adapters::kv_subscriber::replay(
                            ep,
                            expected,
                            Duration::from_secs(2),
                        ));
                    r.map_err(|e| tracing::warn!(error = %e, "engine loop: replay failed"))
                        .ok()
                });
                match replayed {
                    Some(batches) if batches.first().is_some_and(|f| f.seq == expected) => {
                        for r in batches.into_iter().filter(|r| r.seq < got) {
                            self.apply(st, &r);
                        }
                        self.metrics
                            .resyncs
                            .with_label_values(&["gap_replayed"])
                            .inc();
                    }
                    _ => {
                        // The lost events cannot be recovered: start over from what follows.
                        // Blocks cached before the gap are unknown until the engine evicts
                        // them (counted as unknown removals).
                        st.mirror.clear();
                        self.metrics
                            .resyncs
                            .with_label_values(&["gap_cleared"])
                            .inc();
                    }
                }
            }
            SeqCheck::Restart { last, got } => {
                tracing::warn!(
                    last,
                    got,
                    "engine loop: engine restarted; mirror and shadow reset"
                );
                st.mirror.clear();
                st.shadow_changed = true;
                st.dirty = true;
                if let Err(e) = st.shadow.reset(&st.active.config) {
                    tracing::error!(error = %e, "engine loop: shadow reset failed");
                }
                self.metrics.resyncs.with_label_values(&["restart"]).inc();
            }
        }
        self.apply(st, &b);
    }

    fn apply(&self, st: &mut State, b: &KvBatch) {
        let before = st.mirror.issues;
        for ev in &b.events {
            if matches!(ev, KvEvent::AllBlocksCleared) {
                // vLLM publishes a reset only with its next step's events, so a reset asked
                // for before recache subscribed can arrive after the first requests.
                tracing::info!(
                    requests_seen = st.shadow.now(),
                    "engine loop: the engine cleared its cache; shadow reset"
                );
                let _ = st.shadow.reset(&st.active.config);
                st.shadow_changed = true;
                st.dirty = true;
                self.metrics.resyncs.with_label_values(&["cleared"]).inc();
            }
            st.mirror.apply(ev);
        }
        let after = st.mirror.issues;
        for (kind, n) in [
            (
                "unknown_removed",
                after.unknown_removed - before.unknown_removed,
            ),
            (
                "unknown_parent",
                after.unknown_parent - before.unknown_parent,
            ),
            ("bad_tokens", after.bad_tokens - before.bad_tokens),
        ] {
            if n > 0 {
                self.metrics
                    .apply_issues
                    .with_label_values(&[kind])
                    .inc_by(n);
            }
        }
        self.metrics.batches.inc();
        self.metrics.mirror_blocks.set(st.mirror.len() as i64);
        st.events_since_publish = true;
        st.mirror_changed = true;
    }

    fn publish(&self, st: &mut State) {
        st.dirty = false;
        st.events_since_publish = false;
        st.last_publish = Instant::now();
        // At the publish rate (not per request): LARU's stats include its predictor's.
        self.metrics.policy.set(&st.shadow.policy_stats());
        let Some(path) = &self.cfg.publish else {
            return;
        };
        let order = st.shadow.order(&st.mirror);
        self.metrics.victims.set(order.victims as i64);
        self.metrics
            .ranked
            .set((order.hashes.len() - order.victims) as i64);
        st.published += 1;
        match publish::write(path, st.active.generation, st.published, order.hashes) {
            Ok(()) => self.metrics.publishes.inc(),
            Err(e) => {
                self.metrics.publish_errors.inc();
                tracing::warn!(error = %e, path = %path.display(), "engine loop: order not published");
            }
        }
        if st
            .shim_read
            .is_none_or(|t| t.elapsed() >= SHIM_STATUS_EVERY)
        {
            st.shim_read = Some(Instant::now());
            self.read_shim_status(path, st);
        }
    }

    /// What the engine's shim says of the order, into metrics; a change of state is logged.
    fn read_shim_status(&self, order: &std::path::Path, st: &mut State) {
        use super::shim_status::{self, ShimState};
        let status = shim_status::read(order);
        let state = ShimState::of(status.as_ref());
        for s in ShimState::ALL {
            let on = i64::from(s == state);
            self.metrics
                .shim_state
                .with_label_values(&[s.as_str()])
                .set(on);
        }
        if let Some(s) = &status {
            self.metrics.shim_went_stale.set(s.went_stale as i64);
            self.metrics.shim_steer_seconds.set(s.steer_s);
            let age = shim_status::age(s, std::time::SystemTime::now());
            self.metrics.shim_status_age.set(age.as_secs_f64());
        }
        if st.shim_state != Some(state) {
            match state {
                ShimState::Stale => tracing::warn!(
                    path = %order.display(),
                    "engine loop: the engine's shim says the order went stale; its own eviction decides"
                ),
                _ => {
                    tracing::info!(path = %order.display(), state = state.as_str(), "engine loop: shim status")
                }
            }
            st.shim_state = Some(state);
        }
    }
}
