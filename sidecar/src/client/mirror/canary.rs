//! The canary: does a replica's mirror say what its engine does? Every `--route-canary`
//! period (and twice, half a second apart, once a feed first connects) recache sends each
//! fed replica a small token prompt of its own, one generated token, straight to that
//! replica, and compares the cached tokens its mirror predicted just before with the cached
//! tokens the engine reports:
//!
//! - equal: `exact`;
//! - hits predicted, none delivered: the silent-0% condition (prefix caching off, a cache
//!   salt, another model, a different block hash): warning metric and log, `degraded`;
//! - any other difference (the mirror missed events): `degraded`;
//! - unless the events say the canary's blocks were evicted while it waited for its answer
//!   (a busy engine making room): then the difference says nothing about the mirror, and the
//!   canary is `evicted`, inconclusive, leaving the state as it was ([`super::watch`]).
//!
//! The prompt is three [`TOKENS_PER_KEY`] blocks and one more token: the first two blocks
//! are fixed for this recache process (so from the second canary on, both sides expect them
//! cached unless the engine evicted them, which its events would say), the third changes
//! every round. Token ids stay in 256..2304, ordinary ids in any byte-level BPE vocabulary.
//!
//! Each canary is counted as recache's own call ([`crate::client::own`]: requests, prompt
//! and cached tokens per upstream), never as a client's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;

use super::MirrorState;
use super::feed::FeedStatus;
use crate::client::route::keys::TOKENS_PER_KEY;
use crate::client::{EngineClient, own};
use crate::shutdown::TaskGuard;
use recache_hash::blocks::prompt_ids;

/// Pause between the first canary after a feed connects and the second (events of the first
/// must have arrived).
const FOLLOW_UP: Duration = Duration::from_millis(500);
/// How often replicas not yet due are looked at (a feed that just connected).
const TICK: Duration = Duration::from_millis(250);

/// What one canary found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Agree,
    MissedEvents,
    SilentZero,
    /// The engine evicted the canary's blocks while it waited: inconclusive.
    Evicted,
    /// The engine does not report cached tokens: the mirror cannot be checked.
    Unreported,
    Failed,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Self::Agree => "agree",
            Self::MissedEvents => "missed_events",
            Self::SilentZero => "silent_zero",
            Self::Evicted => "evicted",
            Self::Unreported => "unreported",
            Self::Failed => "failed",
        }
    }
}

/// The canary's prompt for `round`.
pub fn prompt(nonce: u64, round: u64) -> Vec<u32> {
    let token = |block: u64, j: u64| {
        let h = recache_hash::mix64(recache_hash::mix64(nonce ^ block) ^ j);
        256 + (h % 2048) as u32
    };
    let per = TOKENS_PER_KEY as u64;
    (0..per)
        .map(|j| token(0, j))
        .chain((0..per).map(|j| token(1, j)))
        .chain((0..=per).map(|j| token(2 + round, j)))
        .collect()
}

/// Starts the canaries over `feeds` (replica index, its feed), every `period`.
pub fn spawn(
    client: Arc<EngineClient>,
    feeds: Vec<(usize, Arc<FeedStatus>)>,
    period: Duration,
) -> TaskGuard {
    TaskGuard::spawn(move |mut stop| async move {
        // Distinct per process, so two recache instances never share a canary.
        let nonce = recache_hash::mix64(
            u64::from(std::process::id())
                ^ std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0),
        );
        let mut round = 0u64;
        // Per replica: when it is due, and how many canaries it has had.
        let mut due: Vec<(Instant, u64)> = vec![(Instant::now(), 0); feeds.len()];
        loop {
            tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                _ = stop.changed() => return,
            }
            for (k, (index, status)) in feeds.iter().enumerate() {
                let now = Instant::now();
                if now < due[k].0 || !status.feeding() {
                    continue;
                }
                round += 1;
                check(&client, *index, status, nonce, round).await;
                due[k].1 += 1;
                let wait = if due[k].1 == 1 { FOLLOW_UP } else { period };
                due[k].0 = Instant::now() + wait;
            }
        }
    })
}

/// One canary on replica `index`: predicts, sends, compares, sets the mirror's state.
pub async fn check(
    client: &EngineClient,
    index: usize,
    status: &FeedStatus,
    nonce: u64,
    round: u64,
) -> Outcome {
    let Some(replica) = client.replicas().get(index) else {
        return Outcome::Failed;
    };
    let mirror = &replica.mirror;
    let label = replica.label.as_str();
    let tokens = prompt(nonce, round);
    let keys = prompt_ids(&tokens, TOKENS_PER_KEY);
    // The two fixed blocks are watched for evictions while the canary waits.
    mirror.watch.set(&keys[..keys.len().min(2)]);
    let since = mirror.watch.as_published();
    let predicted = (mirror.held_prefix(&keys) * TOKENS_PER_KEY) as u64;
    let engine = client.settings.engine;
    let (path, body) = engine.probe_body(&tokens);
    // Counted apart from clients' calls, so readers of the engine's counters can take it out.
    let own = client.own_call(index, own::CANARY, tokens.len() as u64);
    let answer = client.json_to(index, Method::POST, path, Some(&body)).await;
    if let Ok(a) = &answer
        && let Some(cached) = engine.reported_cached_tokens(&a.value)
    {
        own.cached(cached);
    }
    drop(own);
    let outcome = match answer {
        Err(e) => {
            tracing::warn!(upstream = label, error = %e, "routing canary failed");
            Outcome::Failed
        }
        Ok(a) if !a.status.is_success() => {
            tracing::warn!(upstream = label, status = %a.status, answer = %a.value, "routing canary refused");
            Outcome::Failed
        }
        Ok(a) => match engine.reported_cached_tokens(&a.value) {
            None => Outcome::Unreported,
            Some(delivered) if delivered < predicted && mirror.watch.left_since(since) => {
                tracing::debug!(
                    upstream = label,
                    predicted,
                    delivered,
                    "routing canary inconclusive: its blocks were evicted while it waited"
                );
                Outcome::Evicted
            }
            Some(delivered) => {
                mirror.observe(predicted, delivered, label);
                if predicted == delivered {
                    mirror.set_silent_zero(false, label);
                    Outcome::Agree
                } else if delivered == 0 {
                    mirror.set_silent_zero(true, label);
                    Outcome::SilentZero
                } else {
                    tracing::warn!(
                        upstream = label,
                        predicted,
                        delivered,
                        "routing canary: the mirror disagrees with the engine"
                    );
                    Outcome::MissedEvents
                }
                .tap_state(mirror, status, predicted, delivered, label)
            }
        },
    };
    if let Some(m) = mirror.metrics() {
        m.canary(outcome.name());
    }
    if outcome == Outcome::Unreported && status.feeding() && mirror.state() != MirrorState::Exact {
        mirror.set_state(
            MirrorState::Exact,
            format!(
                "the engine does not report cached tokens ({}: vLLM needs \
                 --enable-prompt-tokens-details): mirror not verified",
                engine.name()
            ),
            label,
        );
    }
    outcome
}

impl Outcome {
    /// Sets the mirror's state from this outcome (while events still flow) and returns it.
    fn tap_state(
        self,
        mirror: &super::ReplicaMirror,
        status: &FeedStatus,
        predicted: u64,
        delivered: u64,
        label: &str,
    ) -> Self {
        if !status.feeding() {
            return self;
        }
        let said = format!(
            "canary: mirror predicted {predicted} cached tokens, engine reported {delivered}"
        );
        let state = if self == Self::Agree {
            MirrorState::Exact
        } else {
            MirrorState::Degraded
        };
        mirror.set_state(state, said, label);
        self
    }
}

#[cfg(test)]
#[path = "canary_tests.rs"]
mod tests;
