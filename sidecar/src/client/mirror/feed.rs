//! One replica's KV-event feed: a subscription to its engine's publisher, applied to a
//! [`Mirror`] (the engine loop's exact model of a prefix cache) on a thread of its own, and
//! the mirror's content ids republished for the request path at most every
//! [`PUBLISH_EVERY`] (a rebuild of a 100k-block set takes milliseconds: never on the
//! runtime's threads).
//!
//! Resyncs: a sequence gap clears the mirror (lost events cannot be recovered here; no replay
//! endpoint per replica) and marks it `degraded` until a canary agrees again; an engine
//! restart (sequence back to 0) clears it and keeps the state (the engine's cache is empty
//! too); a reconnect clears it and marks it `degraded` (events published meanwhile are lost).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use recache_adapters::kv_events::{KvBatch, KvEvent, SeqCheck, SeqTracker};
use recache_adapters::kv_subscriber::{self, Incoming, SubscriberConfig};

use super::{MirrorState, ReplicaMirror};
use crate::client::replica::Replica;
use crate::client::route::keys::TOKENS_PER_KEY;
use crate::kvloop::mirror::Mirror;
use crate::shutdown::TaskGuard;

/// Longest time a changed mirror waits to be republished.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(20);

/// What the feed knows that the canary needs: whether events flow into a usable mirror.
#[derive(Debug, Default)]
pub struct FeedStatus {
    connected: AtomicBool,
    /// Events name blocks the route keys can match (their block size is the keys').
    usable: AtomicBool,
}

impl FeedStatus {
    /// Whether a canary can judge the mirror now.
    pub fn feeding(&self) -> bool {
        self.connected.load(Ordering::Relaxed) && self.usable.load(Ordering::Relaxed)
    }
}

/// Starts `replica`'s feed from `endpoint`. `verified_by_canary`: the state turns `exact`
/// only when a canary agrees (else on connecting).
pub fn spawn(
    replica: Arc<Replica>,
    endpoint: String,
    verified_by_canary: bool,
) -> (TaskGuard, Arc<FeedStatus>) {
    let (tx, rx) = channel();
    let status = Arc::new(FeedStatus {
        connected: AtomicBool::new(false),
        usable: AtomicBool::new(true),
    });
    let sub = SubscriberConfig::new(endpoint.clone());
    let guard = TaskGuard::spawn(move |mut stop| async move {
        tokio::select! {
            () = kv_subscriber::run(sub, move |inc| tx.send(inc).is_ok()) => {}
            _ = stop.changed() => {}
        }
    });
    let feed = Feed {
        replica,
        endpoint,
        verified_by_canary,
        status: status.clone(),
        mirror: Mirror::new(),
        seq: SeqTracker::new(),
        connects: 0,
    };
    let spawned = std::thread::Builder::new()
        .name("recache-route-mirror".into())
        .spawn(move || feed.run(rx));
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start a routing mirror thread; that upstream stays approximate");
    }
    (guard, status)
}

struct Feed {
    replica: Arc<Replica>,
    endpoint: String,
    verified_by_canary: bool,
    status: Arc<FeedStatus>,
    mirror: Mirror,
    seq: SeqTracker,
    connects: u64,
}

impl Feed {
    fn view(&self) -> &ReplicaMirror {
        &self.replica.mirror
    }

    fn set(&self, state: MirrorState, why: impl Into<String>) {
        self.view().set_state(state, why, &self.replica.label);
    }

    fn run(mut self, rx: Receiver<Incoming>) {
        let mut changed = false;
        let mut last_publish = Instant::now();
        loop {
            match rx.recv_timeout(PUBLISH_EVERY) {
                Ok(inc) => {
                    // The canary's watched blocks: did this message take any away?
                    let replica = self.replica.clone();
                    let watch = &replica.mirror.watch;
                    let before = watch.present(|id| self.mirror.hash_of(id).is_some());
                    changed |= self.handle(inc);
                    let after = watch.present(|id| self.mirror.hash_of(id).is_some());
                    watch.note(before, after);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if changed && last_publish.elapsed() >= PUBLISH_EVERY {
                self.view().publish(self.mirror.content_ids().collect());
                changed = false;
                last_publish = Instant::now();
            }
        }
    }

    /// Applies one message; true when the mirror changed.
    fn handle(&mut self, inc: Incoming) -> bool {
        match inc {
            Incoming::Connected => {
                self.connects += 1;
                self.status.connected.store(true, Ordering::Relaxed);
                tracing::info!(upstream = %self.replica.label, endpoint = %self.endpoint, "routing mirror subscribed to KV events");
                if !self.status.usable.load(Ordering::Relaxed) {
                    return false;
                }
                if self.connects > 1 {
                    // Events published while disconnected are lost.
                    self.mirror.clear();
                    self.count("reconnect");
                    self.set(
                        MirrorState::Degraded,
                        "reconnected to KV events: events published meanwhile were lost",
                    );
                    return true;
                }
                if self.verified_by_canary {
                    self.set(
                        MirrorState::Approximate,
                        "KV events connected; awaiting the first canary",
                    );
                } else {
                    self.set(
                        MirrorState::Exact,
                        "KV events connected (canaries off: not verified)",
                    );
                }
                false
            }
            Incoming::Disconnected => {
                self.status.connected.store(false, Ordering::Relaxed);
                self.set(
                    MirrorState::Approximate,
                    format!("KV event publisher {} unreachable", self.endpoint),
                );
                false
            }
            Incoming::Malformed(e) => {
                tracing::warn!(upstream = %self.replica.label, error = %e, "routing mirror: undecodable KV event message skipped");
                false
            }
            Incoming::Batch(b) => self.batch(&b),
        }
    }

    fn batch(&mut self, b: &KvBatch) -> bool {
        match self.seq.check(b.seq) {
            SeqCheck::InOrder => {}
            SeqCheck::Duplicate => return false,
            SeqCheck::Gap { expected, got } => {
                self.mirror.clear();
                self.count("gap_cleared");
                self.set(
                    MirrorState::Degraded,
                    format!("KV events {expected}..{got} lost; mirror cleared"),
                );
            }
            SeqCheck::Restart { .. } => {
                // The engine restarted: its cache is as empty as the cleared mirror.
                self.mirror.clear();
                self.count("restart");
            }
        }
        for ev in &b.events {
            if let KvEvent::BlockStored { block_size, .. } = ev
                && *block_size as usize != TOKENS_PER_KEY
                && self.status.usable.swap(false, Ordering::Relaxed)
            {
                self.set(
                    MirrorState::Approximate,
                    format!(
                        "KV events have {block_size}-token blocks; route keys are {TOKENS_PER_KEY}-token blocks"
                    ),
                );
            }
            self.mirror.apply(ev);
        }
        true
    }

    fn count(&self, reason: &str) {
        if let Some(m) = self.view().metrics() {
            m.resync(reason);
        }
    }
}
