//! The engines' counters around a measured run, read so that what they count and what recache
//! says it sent on its own account ([`crate::own_traffic`]) cover the same calls: a
//! [`Snapshot`] reads recache's `/metrics`, the engines', then recache's again, and is kept
//! only when no own call was in flight or sent in between. After a run, [`settled`] repeats
//! snapshots until the engines' counters stop moving (they count a request as its output is
//! processed, a moment after the answer) and the caller's condition holds, with a deadline
//! and a warning naming what was not reached: never a fixed sleep.

use std::time::{Duration, Instant};

use crate::error::BenchError;
use crate::http::{self, HttpClient, counter};
use crate::own_traffic;

/// Between two reads.
const PAUSE: Duration = Duration::from_millis(50);
/// Between two snapshots compared for movement.
const SETTLE_PAUSE: Duration = Duration::from_millis(250);
/// Longest a snapshot waits for recache's own calls to be out of flight.
const QUIET_LIMIT: Duration = Duration::from_secs(10);
/// Longest a settle waits.
const SETTLE_LIMIT: Duration = Duration::from_secs(20);

/// Every engine's `/metrics` text and every recache instance's (none for a peer).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub engines: Vec<String>,
    pub recache: Vec<String>,
}

/// Reads `recache`, `engines`, `recache` again until no own call of recache was in flight or
/// sent across the engines' read (up to [`QUIET_LIMIT`], then the last reading, with a
/// warning).
pub async fn take<E, R>(engines: &mut E, recache: &mut R) -> Result<Snapshot, BenchError>
where
    E: AsyncFnMut() -> Result<Vec<String>, BenchError>,
    R: AsyncFnMut() -> Result<Vec<String>, BenchError>,
{
    let deadline = Instant::now() + QUIET_LIMIT;
    loop {
        let first = recache().await?;
        let engine_texts = engines().await?;
        let second = if first.is_empty() {
            Vec::new()
        } else {
            recache().await?
        };
        let calls = |texts: &[String]| {
            (texts.iter())
                .map(|t| own_traffic::sent_and_in_flight(t))
                .collect::<Vec<_>>()
        };
        let (a, b) = (calls(&first), calls(&second));
        let quiet = a == b && b.iter().all(|&(_, in_flight)| in_flight == 0.0);
        if quiet || Instant::now() >= deadline {
            if !quiet {
                eprintln!(
                    "bench: warning: recache's own calls (canaries) kept crossing the engines' \
                     counter reads for {QUIET_LIMIT:?}; the row may count one of them"
                );
            }
            return Ok(Snapshot {
                engines: engine_texts,
                recache: second,
            });
        }
        tokio::time::sleep(PAUSE).await;
    }
}

/// After a run: snapshots until the engine counters `names` read the same in two in a row
/// and `done` (given the newest snapshot; `Err` says what is missing) holds, up to
/// [`SETTLE_LIMIT`]; then the last one, with a warning naming `what` and what was missing.
pub async fn settled<E, R>(
    what: &str,
    engines: &mut E,
    recache: &mut R,
    names: &[&str],
    done: impl Fn(&Snapshot) -> Result<(), String>,
) -> Result<Snapshot, BenchError>
where
    E: AsyncFnMut() -> Result<Vec<String>, BenchError>,
    R: AsyncFnMut() -> Result<Vec<String>, BenchError>,
{
    let deadline = Instant::now() + SETTLE_LIMIT;
    let values = |s: &Snapshot| -> Vec<f64> {
        (s.engines.iter())
            .flat_map(|t| names.iter().map(|n| counter(t, n)))
            .collect()
    };
    let mut last = take(engines, recache).await?;
    loop {
        tokio::time::sleep(SETTLE_PAUSE).await;
        let now = take(engines, recache).await?;
        let still = values(&now) == values(&last);
        let missing = match done(&now) {
            Ok(()) if still => return Ok(now),
            Ok(()) => "the counters still moving".to_string(),
            Err(why) => why,
        };
        if Instant::now() >= deadline {
            eprintln!(
                "bench: warning: {what}: the engines' counters did not settle within \
                 {SETTLE_LIMIT:?} ({missing}); the row counts what they showed"
            );
            return Ok(now);
        }
        last = now;
    }
}

/// One engine's `/metrics` at `url` once its counters `names` stop moving ([`settled`]), for
/// a run whose recache has one upstream (it sends no canaries then) or none.
pub async fn settled_one(
    what: &str,
    client: &HttpClient,
    url: &str,
    names: &[&str],
) -> Result<String, BenchError> {
    let mut engines = async || -> Result<Vec<String>, BenchError> {
        Ok(vec![http::get_text(client, url).await?])
    };
    let mut none = async || -> Result<Vec<String>, BenchError> { Ok(Vec::new()) };
    let s = settled(what, &mut engines, &mut none, names, |_| Ok(())).await?;
    Ok(s.engines.into_iter().next().unwrap_or_default())
}

/// The counters of `engine` a settle waits on: its cache's queries and hits, finished
/// requests and connector hits where it has them.
pub fn engine_counters(engine: recache_adapters::Engine) -> Vec<&'static str> {
    let c = engine.cache_counters();
    [Some(c.queries), Some(c.hits)]
        .into_iter()
        .chain([engine.requests_counter(), engine.external_hits_counter()])
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    const OWN: &str = "recache_own_requests_total{upstream=\"e:1\",what=\"canary\"}";

    #[tokio::test]
    async fn a_snapshot_waits_out_an_own_call_in_flight() {
        // recache reads: a canary in flight, then sent and answered, then quiet.
        let reads = [
            format!("{OWN} 1\nrecache_own_in_flight{{upstream=\"e:1\"}} 1\n"),
            format!("{OWN} 1\nrecache_own_in_flight{{upstream=\"e:1\"}} 0\n"),
            format!("{OWN} 1\nrecache_own_in_flight{{upstream=\"e:1\"}} 0\n"),
        ];
        let (n, m) = (Cell::new(0usize), Cell::new(0usize));
        let mut recache = async || -> Result<Vec<String>, BenchError> {
            let i = n.get();
            n.set(i + 1);
            Ok(vec![reads[i.min(2)].clone()])
        };
        let mut engines = async || -> Result<Vec<String>, BenchError> {
            m.set(m.get() + 1);
            Ok(vec![format!("engine read {}", m.get())])
        };
        let s = take(&mut engines, &mut recache).await.expect("snapshot");
        assert_eq!(
            s.engines,
            ["engine read 2"],
            "the first read had a call in flight"
        );
        // A peer: no recache, one read.
        let mut none = async || -> Result<Vec<String>, BenchError> { Ok(Vec::new()) };
        let s = take(&mut engines, &mut none).await.expect("snapshot");
        assert_eq!((s.engines.len(), s.recache.len()), (1, 0));
    }

    #[tokio::test]
    async fn settling_waits_until_counters_stop_and_the_condition_holds() {
        // The counter reaches 10 on the third read and stays there.
        let reads = Cell::new(0u32);
        let mut engines = async || -> Result<Vec<String>, BenchError> {
            reads.set(reads.get() + 1);
            Ok(vec![format!("c_total {}\n", (reads.get() * 5).min(10))])
        };
        let mut none = async || -> Result<Vec<String>, BenchError> { Ok(Vec::new()) };
        let s = settled(
            "test",
            &mut engines,
            &mut none,
            &["c_total"],
            |s| match counter(&s.engines[0], "c_total") {
                v if v >= 10.0 => Ok(()),
                v => Err(format!("{v} of 10 counted")),
            },
        )
        .await
        .expect("settled");
        assert_eq!(counter(&s.engines[0], "c_total"), 10.0);
        assert!(reads.get() >= 3, "{} reads", reads.get());
    }
}
