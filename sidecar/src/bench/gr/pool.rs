//! The pool modes' optional warm start (`--pool-warm N`): before the timed stream, the N most
//! popular items of the catalog (interaction counts of `--data`, known before any request) are
//! filled through the mode's recache, as a deployment fills its item pool ahead of time with
//! its hottest items. Untimed; its engine work is not counted in the mode's row.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bench::BenchError;
use crate::rank::pool::{self, Wanted};
use crate::service::AppState;

/// Fills `items` (id, tokens) and waits until no fill is in flight (at most `limit`);
/// returns (resident items, seconds).
pub async fn warm(
    state: &Arc<AppState>,
    model: &str,
    items: Vec<(u64, Vec<u32>)>,
    limit: Duration,
) -> Result<(usize, f64), BenchError> {
    let Some(p) = state.rank.pool.clone() else {
        return Err(BenchError::Setup(
            "--pool-warm: this mode's recache has no item pool".into(),
        ));
    };
    let t0 = Instant::now();
    // Sent in chunks no larger than the admission's in-flight bound.
    for chunk in items.chunks(p.config.max_pending.max(1)) {
        let wanted = chunk
            .iter()
            .map(|(id, tokens)| Wanted {
                key: pool::key(Some(model), &id.to_string()),
                // Known-hot items count as requested once: an item must be requested twice
                // before it displaces one of them.
                count: 1,
                tokens: Arc::new(tokens.clone()),
            })
            .collect();
        p.want(state, Some(model), wanted);
        while p.counts().1 > 0 {
            if t0.elapsed() > limit {
                return Err(BenchError::Setup(format!(
                    "--pool-warm: fills still pending after {limit:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok((p.counts().0, t0.elapsed().as_secs_f64()))
}
