//! Computing items into the pool ahead of time (BAT §5.2 step 3: item KV is precomputed
//! offline and loaded before serving). Given items hottest first, fills those not resident yet
//! into free label slots (an item never displaces a hotter one), keeping the fill pipeline full
//! without the serving refresh bound, and waits for every fill to answer. Used by `recache
//! serve --rank-item-catalog` at start-up and by `recache bench gr` before a pool mode's
//! timed stream; the caller reports progress.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ItemPool, Wanted};
use crate::engine::EngineHandle;

/// What a precompute did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Precomputed {
    /// Items filled now, and the tokens the engine computed for them.
    pub filled: usize,
    pub tokens: u64,
    /// Items resident afterwards (filled now or before).
    pub resident: usize,
    pub seconds: f64,
}

/// Why a precompute stopped early.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PrecomputeError {
    /// One replica's precompute task ended without an answer (it panicked).
    #[error("item pool precompute: {0}")]
    Task(String),
    #[error("item pool precompute: fills still pending after {0:?}")]
    Timeout(Duration),
    #[error(
        "item pool precompute: {failed} of {sent} fills failed (is the engine up, with the connector?)"
    )]
    Failed { failed: u64, sent: usize },
}

impl ItemPool {
    /// Fills `items` (hottest first) that are not resident, as far as free slots go; `progress`
    /// is called with (done, total) as fills answer. Fails when fills are still pending after
    /// `limit` or when every fill of a batch failed.
    pub async fn precompute(
        self: &Arc<Self>,
        engine: &Arc<EngineHandle>,
        model: Option<&str>,
        items: Vec<Wanted>,
        limit: Duration,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<Precomputed, PrecomputeError> {
        let t0 = Instant::now();
        let (resident_before, _) = self.counts();
        let room = self.config.items.saturating_sub(resident_before);
        let todo: Vec<Wanted> = {
            let keys: Vec<String> = items.iter().map(|w| w.key.clone()).collect();
            let held = self.labels(&keys);
            items
                .into_iter()
                .zip(held)
                .filter(|(_, label)| label.is_none())
                // Counted as requested once: an item must be requested more often while
                // serving before it displaces a precomputed one (admission keeps input order
                // among equals, so the hottest still go first).
                .map(|(w, _)| Wanted { count: 1, ..w })
                .take(room)
                .collect()
        };
        let total = todo.len();
        // This pool's own counts: with several replicas the metrics add up all pools.
        let (ok_before, err_before, tokens_before) = self.fills_done();
        let mut sent = 0;
        let mut rest = todo.into_iter().peekable();
        let done = || {
            let (ok, err, _) = self.fills_done();
            (ok - ok_before, err - err_before)
        };
        progress(0, total);
        loop {
            // Top the pipeline up to its bound; admission order keeps the hottest first.
            let (_, pending) = self.counts();
            let room = self.config.max_pending.saturating_sub(pending);
            if room > 0 && rest.peek().is_some() {
                let batch: Vec<Wanted> = rest.by_ref().take(room).collect();
                sent += batch.len();
                let fills = self.admit_within(batch, false);
                if !fills.is_empty() {
                    self.filler
                        .spawn(engine, self, model.map(str::to_string), fills);
                }
            }
            let (ok, err) = done();
            progress((ok + err) as usize, total);
            if self.counts().1 == 0 && rest.peek().is_none() {
                break;
            }
            if t0.elapsed() > limit {
                return Err(PrecomputeError::Timeout(limit));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (ok, err) = done();
        if err > 0 && ok == 0 {
            return Err(PrecomputeError::Failed { failed: err, sent });
        }
        Ok(Precomputed {
            filled: ok as usize,
            tokens: self.fills_done().2 - tokens_before,
            resident: self.counts().0,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }
}
