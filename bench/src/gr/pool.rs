//! A pool mode's item pool around its timed stream: before it, the pool made exactly the
//! precomputed set (so every pool mode starts from the same pool, [`prepare`]); after it, the
//! fills the stream started and that are still running awaited, so their work is counted in
//! the row ([`settle`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::progress::Progress;
use recache::harness::{LocalServer, Verdict, Wanted, check_labels, pool_key};

use crate::error::BenchError;

/// How long [`settle`] waits for fills still running when a stream ends (one item's fill is a
/// short prefill; minutes mean the engine is stuck, and the row says how many were left).
pub const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// A pool mode's pool, made exactly the precomputed set: adopt what the engine holds, evict
/// the rest, compute what is missing. Returns (tokens computed, seconds).
pub async fn prepare(
    server: &LocalServer,
    model: &str,
    warm: &[(u64, Arc<Vec<u32>>)],
    name: &str,
) -> Result<(u64, f64), BenchError> {
    let state = server.ranker();
    if let Verdict::TooSmall(msg) = check_labels(state).await {
        return Err(BenchError::Setup(msg));
    }
    let Some(p) = server.pools() else {
        return Err(BenchError::Setup(format!(
            "{name}: this mode's recache has no item pool"
        )));
    };
    let model = Some(model);
    let (adopted, _) = p
        .sync(&state.engine, model)
        .await
        .map_err(|e| BenchError::Setup(format!("{name}: reading the engine's item pool: {e}")))?;
    let wanted: Vec<Wanted> = warm
        .iter()
        .map(|(id, tokens)| Wanted {
            key: pool_key(model, &id.to_string()),
            count: 1,
            tokens: tokens.clone(),
        })
        .collect();
    let keep: HashSet<String> = wanted.iter().map(|w| w.key.clone()).collect();
    let dropped = p.retain_only(&keep);
    // The count to compute (what is not resident yet) is known once the precompute starts.
    let progress = std::sync::OnceLock::new();
    let show = |done: usize, total: usize| {
        progress
            .get_or_init(|| Progress::new(total as u64, format!("{name} precompute")))
            .set(done as u64);
    };
    let limit = Duration::from_secs(3 * 3600);
    let hot_share = server.routing().pool_hot_share();
    let done = p
        .precompute(&state.engine, model, wanted, hot_share, limit, &show)
        .await
        .map_err(|e| BenchError::Setup(format!("{name}: {e}")))?;
    if let Some(p) = progress.get() {
        p.finish();
    }
    eprintln!(
        "bench gr: {name}: pool {} items ({adopted} kept from the engine, {dropped} evicted, {} \
         computed: {} tokens in {:.1}s)",
        done.resident, done.filled, done.tokens, done.seconds
    );
    Ok((done.tokens, done.seconds))
}

/// Waits until the pool has no fill in flight (at most `limit`): fills the stream started are
/// part of its work, so the engine's counters and `fill_tokens` are read after them. Returns
/// (seconds waited, fills still pending when the wait gave up: 0 unless `limit` ran out).
pub async fn settle(server: &LocalServer, limit: Duration) -> (f64, usize) {
    let t0 = Instant::now();
    loop {
        let pending = server.pending_fills();
        if pending == 0 || t0.elapsed() >= limit {
            return (t0.elapsed().as_secs_f64(), pending);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
