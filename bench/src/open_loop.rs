//! The open loop of every benchmark with planned arrivals (`bench gr` at an offered load,
//! `bench slo`): request `i` is released at its planned arrival `start + arrivals_s[i]`
//! whatever the answers so far, waits for one of `limit` client slots when the benchmark caps
//! the requests in flight, and its latency counts from the planned arrival, so time spent
//! queued (for a slot here, or in the server) is part of it, as a user would see it. The time
//! from when it was sent (service time) is kept beside it.
//!
//! Slots are taken in order of planned arrival, ties by index, so a closed loop (every arrival
//! at 0) sends its requests in index order: at one slot the server sees the same sequence on
//! every run (`bench quality` relies on it: an item-first prompt's order depends on the
//! requests before it).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

/// How long after the call the first arrival is planned: spawning every request first must
/// not make the early ones late.
pub const LEAD: Duration = Duration::from_millis(50);

/// One answered request.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed<T> {
    /// The request's index in the stream.
    pub index: usize,
    /// Milliseconds from its planned arrival to its answer.
    pub latency_ms: f64,
    /// Milliseconds from when it was sent (after waiting for a slot) to its answer.
    pub service_ms: f64,
    pub value: T,
}

/// A stream's answers in the order they came, and its wall time.
#[derive(Debug)]
pub struct Finished<T> {
    /// `Err`: the request's task failed (a panic), with why; its index is unknown.
    pub answers: Vec<Result<Timed<T>, String>>,
    /// Seconds from the first planned arrival (time 0) to the last answer.
    pub wall_s: f64,
}

/// Sends request `i` by awaiting `send(i)` at its planned arrival (at most `limit` in flight
/// when given); `done` is called as each one ends (progress). `send` is called up front and
/// must return a future that starts its work when first polled (an `async` block does; a
/// `tokio::time::sleep` would start its clock when made).
pub async fn run<T, F, Fut>(
    arrivals_s: &[f64],
    limit: Option<usize>,
    send: F,
    mut done: impl FnMut(),
) -> Finished<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let slots = limit.map(|n| Arc::new(Semaphore::new(n.max(1))));
    // Each request's turn to take a slot: its place in (arrival, index) order. A request waits
    // for its turn only after its arrival, so it waits for requests planned no later than it.
    let mut by_arrival: Vec<usize> = (0..arrivals_s.len()).collect();
    by_arrival.sort_by(|&a, &b| arrivals_s[a].total_cmp(&arrivals_s[b]).then(a.cmp(&b)));
    let mut turn_of = vec![0; arrivals_s.len()];
    for (turn, &i) in by_arrival.iter().enumerate() {
        turn_of[i] = turn;
    }
    let (next_turn, turns) = watch::channel(0usize);
    let next_turn = Arc::new(next_turn);
    let start = Instant::now() + LEAD;
    let mut tasks = tokio::task::JoinSet::new();
    for (i, &at) in arrivals_s.iter().enumerate() {
        // An async block does nothing until polled: building it here sends nothing yet.
        let request = send(i);
        let slots = slots.clone();
        let (mut turns, next_turn, turn) = (turns.clone(), next_turn.clone(), turn_of[i]);
        let at = start + Duration::from_secs_f64(at.max(0.0));
        tasks.spawn(async move {
            tokio::time::sleep_until(at).await;
            let _slot = match slots {
                Some(s) => {
                    // Every task holds the sender, so the turn it waits for comes.
                    let _ = turns.wait_for(|&t| t == turn).await;
                    let slot = s.acquire_owned().await.ok();
                    next_turn.send_replace(turn + 1);
                    slot
                }
                None => None,
            };
            let sent = Instant::now();
            let value = request.await;
            Timed {
                index: i,
                latency_ms: at.elapsed().as_secs_f64() * 1e3,
                service_ms: sent.elapsed().as_secs_f64() * 1e3,
                value,
            }
        });
    }
    let mut answers = Vec::with_capacity(arrivals_s.len());
    while let Some(joined) = tasks.join_next().await {
        done();
        answers.push(joined.map_err(|e| format!("task: {e}")));
    }
    Finished {
        answers,
        wall_s: start.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Paused time: one slot, three requests of 100 ms each planned at 0: the third waits
    /// 200 ms for the slot, and its latency from arrival says so while its service time
    /// does not.
    #[tokio::test(start_paused = true)]
    async fn latency_counts_from_planned_arrival_including_the_wait_for_a_slot() {
        let mut ended = 0;
        let out = run(
            &[0.0, 0.0, 0.0],
            Some(1),
            |i| async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                i
            },
            || ended += 1,
        )
        .await;
        assert_eq!(ended, 3);
        let mut got: Vec<Timed<usize>> = out.answers.into_iter().map(|a| a.expect("ok")).collect();
        got.sort_by(|a, b| a.latency_ms.total_cmp(&b.latency_ms));
        let lat: Vec<f64> = got.iter().map(|t| t.latency_ms.round()).collect();
        let service: Vec<f64> = got.iter().map(|t| t.service_ms.round()).collect();
        assert_eq!(lat, [100.0, 200.0, 300.0]);
        assert_eq!(service, [100.0, 100.0, 100.0]);
        assert_eq!((out.wall_s * 1e3).round(), 300.0, "wall from time 0");
    }

    /// One slot and every arrival at 0 (a closed loop): the server sees the requests in index
    /// order, on every run.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_closed_loop_sends_in_index_order() {
        for _ in 0..5 {
            let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
            let send = |i: usize| {
                let seen = seen.clone();
                async move {
                    seen.lock().expect("lock").push(i);
                    tokio::task::yield_now().await;
                }
            };
            run(&[0.0; 32], Some(1), send, || {}).await;
            let order = seen.lock().expect("lock").clone();
            assert_eq!(order, (0..32).collect::<Vec<_>>());
        }
        // Ties by index, otherwise by arrival: index 2 is planned first.
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let send = |i: usize| {
            let seen = seen.clone();
            async move { seen.lock().expect("lock").push(i) }
        };
        run(&[0.02, 0.02, 0.0, 0.04], Some(1), send, || {}).await;
        assert_eq!(*seen.lock().expect("lock"), [2, 0, 1, 3]);
    }

    /// Without a limit every request fires at its own time, however slow the others are.
    #[tokio::test(start_paused = true)]
    async fn unlimited_requests_fire_on_schedule() {
        let out = run(
            &[0.0, 0.05],
            None,
            |_| async { tokio::time::sleep(Duration::from_millis(500)).await },
            || {},
        )
        .await;
        for a in out.answers {
            let a = a.expect("ok");
            assert_eq!(a.latency_ms.round(), 500.0, "{a:?}");
        }
    }
}
