//! The gate's admission, order and refusals under paused time, and the deadline inputs.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use tokio::time::{Instant, advance};

use super::*;

fn demand() -> Demand {
    Demand {
        uncached_tokens: 100,
        output_tokens: 1,
    }
}

fn within(ms: u64) -> Deadline {
    Deadline::within(Duration::from_millis(ms), Instant::now(), false)
}

/// Teaches `gate` an engine taking `base` ms + `per_load` ms per other call in flight, with
/// 200 ms deadlines: 48 calls, one at a time, started with 0 to `loads` − 1 others.
async fn teach(gate: &Arc<Gate>, base: u64, per_load: u64, loads: usize) {
    for i in 0..48usize {
        let load = i % loads;
        let p = gate
            .admit(within(200), demand(), load)
            .await
            .expect("admitted");
        advance(Duration::from_millis(base + per_load * load as u64)).await;
        drop(p);
    }
}

/// 10 ms + 5 ms per call in flight: the window becomes 1 + (200·½ − 10) / 5 = 19 (a call
/// started among 18 others takes 100 ms).
async fn train(gate: &Arc<Gate>) {
    teach(gate, 10, 5, 4).await;
}

#[tokio::test(start_paused = true)]
async fn cold_window_then_a_window_from_the_learned_model() {
    let gate = Gate::new(None);
    let held: Vec<Permit> = futures_join(&gate, 4).await;
    assert_eq!(held.len(), 4);
    // A fifth call waits for a place: it is not answered until one is freed.
    let g = gate.clone();
    let fifth = tokio::spawn(async move { g.admit(within(10_000), demand(), 4).await });
    tokio::task::yield_now().await;
    assert!(
        !fifth.is_finished(),
        "the cold window is {}",
        gate::COLD_WINDOW
    );
    drop(held);
    assert!(fifth.await.expect("task").is_ok());
    // A fresh gate: the calls above took no time and had other deadlines.
    let gate = Gate::new(None);
    train(&gate).await;
    assert_eq!(gate.window(), 19);
}

/// Calls of a burst start at loads 0, 1, 2… but all run alongside each other: the model must
/// learn from the load they met (else a burst looks cheap and the window too wide).
#[tokio::test(start_paused = true)]
async fn learns_from_the_load_a_call_met_not_the_load_it_started_with() {
    let gate = Gate::new(None);
    for round in 0..40usize {
        let n = round % 4 + 1;
        let mut burst = Vec::new();
        for i in 0..n {
            burst.push(gate.admit(within(200), demand(), i).await.expect("room"));
        }
        // The engine of `train`: 10 ms + 5 ms per other call alongside.
        advance(Duration::from_millis(10 + 5 * (n as u64 - 1))).await;
        drop(burst);
    }
    assert_eq!(gate.window(), 19);
}

async fn futures_join(gate: &Arc<Gate>, n: usize) -> Vec<Permit> {
    let mut out = Vec::new();
    for i in 0..n {
        out.push(gate.admit(within(10_000), demand(), i).await.expect("room"));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn refuses_at_once_what_cannot_make_its_deadline() {
    let gate = Gate::new(None);
    train(&gate).await;
    // 10 ms of service at best: a 5 ms deadline cannot be met.
    let r = gate
        .admit(within(5), demand(), 0)
        .await
        .expect_err("refused");
    assert!(
        !r.late && r.predicted_ms >= 9.9 && r.budget_ms == 5,
        "{r:?}"
    );
    assert!(r.retry_after_s >= 1);
    // Best effort is served anyway.
    let d = Deadline::within(Duration::from_millis(5), Instant::now(), true);
    assert!(gate.admit(d, demand(), 0).await.is_ok());
}

/// 60 ms + 60 ms per other call in flight: the window becomes 1 (a second call alongside
/// would take 120 ms > 100 ms), so each call brings 60 ms of the replica's time.
async fn train_slow(gate: &Arc<Gate>) {
    teach(gate, 60, 60, 2).await;
}

/// Returns when every other task is idle: a sleep under paused time ends only then.
async fn advance_idle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// Best effort is served late while the replica keeps up on average; once it is offered more
/// than it serves, late work could only pile up and a best-effort call that cannot make its
/// deadline is refused like any other.
#[tokio::test(start_paused = true)]
async fn best_effort_is_demoted_until_the_replica_is_overloaded() {
    let gate = Gate::new(None);
    train_slow(&gate).await;
    assert_eq!(gate.window(), 1);
    // What training brought in fades.
    advance(Duration::from_secs(60)).await;
    let held = gate.admit(within(200), demand(), 0).await.expect("room");
    let best = |ms: u64| Deadline::within(Duration::from_millis(ms), Instant::now(), true);
    let mut queued = Vec::new();
    let enqueue = |queued: &mut Vec<_>, n: usize| {
        for _ in 0..n {
            let (g, d) = (gate.clone(), best(200));
            queued.push(tokio::spawn(async move { g.admit(d, demand(), 1).await }));
        }
    };
    // 20 best-effort calls behind one 60 ms call: most cannot make 200 ms, all wait.
    enqueue(&mut queued, 20);
    // Once every task has had its turn (paused time only moves when all are idle).
    advance_idle().await;
    assert!(queued.iter().all(|t| !t.is_finished()), "none refused");
    // 20 · 60 ms in 10 s is 0.12 of the replica; the 167th call of 60 ms brings it past 1,
    // and from there on best effort is refused at once.
    enqueue(&mut queued, 180);
    advance_idle().await;
    let refused_from = queued.iter().position(|t| t.is_finished());
    assert!(
        refused_from.is_some_and(|i| (150..=170).contains(&i)),
        "{refused_from:?}"
    );
    let r = gate
        .admit(best(200), demand(), 1)
        .await
        .expect_err("best effort refused under overload");
    assert!(!r.late && r.budget_ms == 200, "{r:?}");
    for t in &queued {
        t.abort();
    }
    drop(held);
}

#[tokio::test(start_paused = true)]
async fn least_slack_goes_first_and_the_hopeless_are_refused_at_their_turn() {
    let gate = Gate::new(None);
    train(&gate).await;
    let window = gate.window();
    let mut held = Vec::new();
    for _ in 0..window {
        held.push(
            gate.admit(within(200), demand(), held.len())
                .await
                .expect("room"),
        );
    }
    // Queue: a loose deadline, a tight one, and one that will have passed by its turn. Their
    // budgets stay near the typical 200 ms so the window (which follows it) stays 19; a full
    // window's service is 100 ms, so their latest starts are +130, +100 and +80 ms.
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (name, ms) in [("loose", 230u64), ("tight", 200), ("doomed", 180)] {
        let (g, order) = (gate.clone(), order.clone());
        let d = within(ms);
        tasks.push(tokio::spawn(async move {
            let r = g.admit(d, demand(), window).await;
            order.lock().expect("order").push((name, r.is_ok()));
            if let Ok(p) = r {
                advance(Duration::from_millis(1)).await;
                drop(p);
            }
        }));
        tokio::task::yield_now().await;
    }
    assert_eq!(gate.window(), window);
    assert!(
        order.lock().expect("order").is_empty(),
        "nobody is admitted before a place frees"
    );
    // Nothing frees up for 90 ms: among 18 others a call takes 100 ms, so "doomed" (180 ms)
    // can no longer finish in time, "tight" (200 ms) still can.
    advance(Duration::from_millis(90)).await;
    drop(held.pop());
    for t in tasks {
        t.await.expect("task");
    }
    let order = order.lock().expect("order").clone();
    assert_eq!(order[0], ("doomed", false), "{order:?}");
    assert_eq!(
        &order[1..],
        &[("tight", true), ("loose", true)],
        "{order:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_while_waiting_frees_nothing_twice() {
    let gate = Gate::new(None);
    let held = futures_join(&gate, gate::COLD_WINDOW).await;
    let g = gate.clone();
    let waiting = tokio::spawn(async move { g.admit(within(10_000), demand(), 4).await });
    tokio::task::yield_now().await;
    waiting.abort();
    let _ = waiting.await;
    drop(held);
    // All four places are free again, and no more.
    let again = futures_join(&gate, gate::COLD_WINDOW).await;
    let g = gate.clone();
    let fifth = tokio::spawn(async move { g.admit(within(10_000), demand(), 4).await });
    tokio::task::yield_now().await;
    assert!(!fifth.is_finished());
    drop(again);
    assert!(fifth.await.expect("task").is_ok());
}

#[test]
fn deadline_headers_are_checked() {
    let now = Instant::now();
    let mut h = HeaderMap::new();
    assert_eq!(from_headers(&h, now).expect("none"), None);
    h.insert(DEADLINE_HEADER, "250".parse().expect("value"));
    let d = from_headers(&h, now).expect("ok").expect("some");
    assert_eq!(
        (d.budget, d.best_effort),
        (Duration::from_millis(250), false)
    );
    h.insert(BEST_EFFORT_HEADER, "1".parse().expect("value"));
    assert!(
        from_headers(&h, now)
            .expect("ok")
            .expect("some")
            .best_effort
    );
    for bad in ["0", "-3", "soon", "99999999999"] {
        h.insert(DEADLINE_HEADER, bad.parse().expect("value"));
        let e = from_headers(&h, now).expect_err(bad);
        assert_eq!(e.what, DEADLINE_HEADER);
    }
    h.insert(DEADLINE_HEADER, "250".parse().expect("value"));
    h.insert(BEST_EFFORT_HEADER, "maybe".parse().expect("value"));
    assert_eq!(
        from_headers(&h, now).expect_err("bad").what,
        BEST_EFFORT_HEADER
    );
}

#[test]
fn settings_refuse_unusable_values_naming_the_flag() {
    use args::{SloArgs, Switch};
    let s = SloArgs::default().try_resolve().expect("defaults");
    assert!(s.enabled && s.rank.is_none());
    let off = SloArgs {
        slo: Some(Switch::Off),
        slo_rank_deadline: Some(Duration::from_millis(200)),
        ..Default::default()
    }
    .try_resolve()
    .expect("off");
    assert!(!off.enabled);
    assert_eq!(
        off.default_for("/v1/rank"),
        Some(Duration::from_millis(200))
    );
    let e = SloArgs {
        slo_dispatch_threshold: Some(1.5),
        ..Default::default()
    }
    .try_resolve()
    .expect_err("threshold");
    assert_eq!(e.setting, "--slo-dispatch-threshold");
    let e = SloArgs {
        slo_chat_deadline: Some(Duration::ZERO),
        ..Default::default()
    }
    .try_resolve()
    .expect_err("zero");
    assert_eq!(e.setting, "--slo-chat-deadline");
}

#[tokio::test]
async fn engine_priority_is_the_deadline_only_when_asked_and_never_overrides_the_client() {
    let on = SloSettings {
        engine_priority: true,
        ..SloSettings::default()
    };
    let stamp = |settings: SloSettings,
                 path: &'static str,
                 ms: Option<u64>,
                 body: serde_json::Value| async move {
        let d = ms.map(|ms| Deadline::within(Duration::from_millis(ms), Instant::now(), false));
        let mut obj = body.as_object().cloned().expect("object");
        let changed = scope(d, async { stamp_priority(&settings, path, &mut obj) }).await;
        (changed, obj.get("priority").cloned())
    };
    let body = serde_json::json!({"prompt": "x"});
    let (changed, early) = stamp(on, "/v1/completions", Some(100), body.clone()).await;
    assert!(changed);
    let (_, late) = stamp(on, "/v1/completions", Some(5_000), body.clone()).await;
    let (early, late) = (
        early.and_then(|v| v.as_i64()),
        late.and_then(|v| v.as_i64()),
    );
    assert!(
        early < late,
        "earlier deadline, lower priority value: {early:?} {late:?}"
    );
    // Off, without a deadline, on a route that does not generate, or the client's own value.
    assert_eq!(
        stamp(
            SloSettings::default(),
            "/v1/completions",
            Some(100),
            body.clone()
        )
        .await,
        (false, None)
    );
    assert_eq!(
        stamp(on, "/v1/completions", None, body.clone()).await,
        (false, None)
    );
    assert_eq!(
        stamp(on, "/tokenize", Some(100), body.clone()).await,
        (false, None)
    );
    let own = serde_json::json!({"prompt": "x", "priority": 7});
    assert_eq!(
        stamp(on, "/v1/completions", Some(100), own).await,
        (false, Some(7.into()))
    );
}
