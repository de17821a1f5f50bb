//! One replica's admission gate: a bounded window of calls with deadlines in flight, the
//! calls waiting for a place ordered by value, and the refusals.
//!
//! - **Window**: how many deadline calls the replica gets at once, from its [`CostModel`]: the
//!   most calls in flight at which a typical call started among the others still takes at
//!   most half the typical deadline (`1 + (target − base) / per_load`). Past it, the engine would only queue them
//!   internally, where recache can neither reorder nor refuse them.
//! - **Order**: least slack first — by latest start time (deadline − predicted service), the
//!   call that can wait least goes first. A call whose deadline can no longer be met when its
//!   turn comes is refused then (before the engine spends anything on it), or, if the client
//!   asked for best effort, demoted behind every call that can still make it (Apt-Serve's
//!   demotion of late requests).
//! - **Best effort has a bound**: a best-effort call is served late only while the replica's
//!   offered load ([`OfferedLoad`]) is below 1, i.e. it keeps up on average and late work
//!   drains once a burst has passed. At 1 or more late work could only pile up (every call
//!   served late delays the next), so a best-effort call that cannot make its deadline is
//!   refused like any other.
//! - **Admission**: a call whose predicted completion (its wait for a place — when the running
//!   calls are predicted to end, and the calls ordered before it take theirs — plus its own
//!   service time) is past its deadline is refused at once, so the client can retry
//!   elsewhere or later (429 with `Retry-After`) rather than wait to be late.
//!
//! Calls without a deadline never wait here; they count as load (the replica's in-flight
//! number) when the window is filled. Until the model has seen enough calls it predicts
//! nothing, and the gate admits everything into a small cold window.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::oneshot;

use super::Deadline;
use super::cost::{CostModel, Demand};
use super::load::OfferedLoad;
use super::metrics::GateMetrics;

/// The window before the cost model is trusted.
pub const COLD_WINDOW: usize = 4;
/// The window's upper bound (an engine batches a few hundred sequences at most).
pub const MAX_WINDOW: usize = 256;
/// Share of the typical deadline a call may spend in service; the rest is for waiting here.
const SERVICE_SHARE: f64 = 0.5;

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// When the call would have finished, from its arrival (ms).
    pub predicted_ms: f64,
    /// Its deadline, from its arrival (ms).
    pub budget_ms: u64,
    /// When a retry might find room (whole seconds, at least 1).
    pub retry_after_s: u64,
    /// Refused when its turn came (true) rather than on arrival.
    pub late: bool,
}

/// A place in the window, held until the call's answer has been passed on. Dropping it frees
/// the place and teaches the model how long the call took.
#[derive(Debug)]
pub struct Permit {
    gate: Arc<Gate>,
    demand: Demand,
    load: f64,
    started: Instant,
    /// The gate's load integral when it started (see [`State::area`]).
    area_at_start: f64,
    deadline: Deadline,
    /// False when the call never reached the engine (a connect failure): nothing to learn.
    served: bool,
    /// Its key in the gate's predicted ends.
    id: u64,
}

impl Permit {
    /// The call did not reach the engine: free the place, learn nothing.
    pub fn not_served(&mut self) {
        self.served = false;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let now = Instant::now();
        let sends = {
            let mut st = self.gate.lock();
            st.tick(now);
            st.running = st.running.saturating_sub(1);
            st.ends.remove(&self.id);
            if self.served {
                let ms = now.duration_since(self.started).as_secs_f64() * 1e3;
                // Learn from the load the call met over its life, not the load it started
                // with: calls of a burst all start at low load and all run at the burst's.
                let met = if ms > 0.0 {
                    ((st.area - self.area_at_start) / ms - 1.0).max(0.0)
                } else {
                    self.load
                };
                st.model.observe(self.demand, met, ms);
                if let Some(m) = &self.gate.metrics {
                    m.finished(now <= self.deadline.at);
                }
            }
            self.gate.pump(&mut st, now)
        };
        Gate::deliver(sends);
    }
}

type Reply = oneshot::Sender<Result<Permit, Refusal>>;

#[derive(Debug)]
struct Waiter {
    deadline: Deadline,
    demand: Demand,
    /// Latest start time: the deadline less the predicted service (the deadline when nothing
    /// is predicted yet).
    lst: Instant,
    arrived: Instant,
    reply: Reply,
}

#[derive(Debug, Default)]
struct State {
    model: CostModel,
    /// Deadline calls holding a place.
    running: usize,
    /// Calls without a deadline in flight when last seen (they take places too).
    others: usize,
    waiting: Vec<Waiter>,
    /// Best-effort calls past their deadline: served when no other call is waiting.
    late: VecDeque<Waiter>,
    /// Work the deadline calls brought in lately, against what the replica serves.
    offered: OfferedLoad,
    /// When each running deadline call is predicted to finish, by permit: where the next
    /// places free up.
    ends: BTreeMap<u64, Instant>,
    next_id: u64,
    /// ∫ (calls in flight) dt in call·ms since the gate was made, and when it was last
    /// brought up to date: a call's mean load over its life is the difference over its span.
    area: f64,
    area_until: Option<Instant>,
    /// Smoothed deadline budget (ms) and demand of the calls seen.
    typical_budget_ms: f64,
    typical: (f64, f64),
}

/// A replica's gate (see the module doc).
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<State>,
    metrics: Option<GateMetrics>,
}

impl Gate {
    pub fn new(metrics: Option<GateMetrics>) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding it leaves plain numbers behind: still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a place for a call with `deadline` and `demand`, `in_flight` calls being on
    /// the replica now; or refuses it.
    pub async fn admit(
        self: &Arc<Self>,
        deadline: Deadline,
        demand: Demand,
        in_flight: usize,
    ) -> Result<Permit, Refusal> {
        let now = Instant::now();
        let rx = {
            let mut st = self.lock();
            st.tick(now);
            st.others = in_flight.saturating_sub(st.running);
            st.learn_typical(deadline.budget, demand);
            let window = st.window();
            if let Some(s) = st.service_ms(demand, window) {
                st.offered.add(now, s / window as f64);
            }
            let offered = st.offered.ratio(now);
            let refusable = refusable(&deadline, offered);
            if let Some(m) = &self.metrics {
                m.show(&st.model, window, st.waiting.len() + st.late.len(), offered);
            }
            let room = st.running + st.others < window || st.running == 0;
            if room && st.waiting.is_empty() && st.late.is_empty() {
                let load = (st.running + st.others) as f64;
                if let Some(s) = st.model.predict_ms(demand, load)
                    && refusable
                    && now + ms(s) > deadline.at
                {
                    return Err(self.refuse(&deadline, now, s, 0.0, false));
                }
                return Ok(self.permit(&mut st, deadline, demand, load, now));
            }
            let lst = st.lst(&deadline, demand, window);
            let ahead = st.waiting.iter().filter(|w| w.lst <= lst).count();
            let wait = st.wait_ms(now, ahead, window);
            if let (Some(wait), Some(s)) = (wait, st.service_ms(demand, window))
                && refusable
                && now + ms(wait + s) > deadline.at
            {
                return Err(self.refuse(&deadline, now, wait + s, wait, false));
            }
            let (tx, rx) = oneshot::channel();
            st.waiting.push(Waiter {
                deadline,
                demand,
                lst,
                arrived: now,
                reply: tx,
            });
            rx
        };
        // The sender is only dropped by the gate when it is dropped itself.
        rx.await.unwrap_or_else(|_| {
            Err(Refusal {
                predicted_ms: 0.0,
                budget_ms: deadline.budget.as_millis() as u64,
                retry_after_s: 1,
                late: true,
            })
        })
    }

    /// Predicted time (ms) until a call with `demand` would finish here, queueing included
    /// (None until the model is trusted): what load-aware dispatch compares across replicas.
    pub fn predict_completion_ms(&self, demand: Demand, in_flight: usize) -> Option<f64> {
        let st = self.lock();
        let window = st.window();
        let load = in_flight.max(st.running);
        if load < window && st.waiting.is_empty() {
            return st.model.predict_ms(demand, load as f64);
        }
        let queued = st.waiting.len() + st.late.len();
        Some(st.wait_ms(Instant::now(), queued, window)? + st.service_ms(demand, window)?)
    }

    /// The window now (metrics, `/ready`).
    pub fn window(&self) -> usize {
        self.lock().window()
    }

    /// Gives a call a place: counted as running, its predicted end recorded.
    fn permit(
        self: &Arc<Self>,
        st: &mut State,
        deadline: Deadline,
        demand: Demand,
        load: f64,
        now: Instant,
    ) -> Permit {
        if let Some(m) = &self.metrics {
            m.admitted();
        }
        st.tick(now);
        st.running += 1;
        st.next_id += 1;
        let id = st.next_id;
        let service = st.model.predict_ms(demand, load).unwrap_or(0.0);
        st.ends.insert(id, now + ms(service));
        Permit {
            gate: self.clone(),
            demand,
            load,
            started: now,
            area_at_start: st.area,
            deadline,
            served: true,
            id,
        }
    }

    fn refuse(&self, d: &Deadline, now: Instant, predicted: f64, wait: f64, late: bool) -> Refusal {
        if let Some(m) = &self.metrics {
            m.refused(late);
        }
        let arrived = d.at.checked_sub(d.budget).unwrap_or(now);
        let since = now.saturating_duration_since(arrived);
        Refusal {
            predicted_ms: since.as_secs_f64() * 1e3 + predicted,
            budget_ms: d.budget.as_millis() as u64,
            retry_after_s: ((wait / 1e3).ceil() as u64).max(1),
            late,
        }
    }

    /// Hands free places to waiting calls, refusing those that can no longer make it. The
    /// replies are sent by the caller after the lock is released ([`Self::deliver`]): a reply
    /// nobody awaits drops its permit, which takes the lock.
    fn pump(
        self: &Arc<Self>,
        st: &mut State,
        now: Instant,
    ) -> Vec<(Reply, Result<Permit, Refusal>)> {
        let mut out = Vec::new();
        let window = st.window();
        let offered = st.offered.ratio(now);
        while st.running + st.others < window || st.running == 0 {
            let w = if let Some(i) = (0..st.waiting.len()).min_by_key(|&i| st.waiting[i].lst) {
                st.waiting.swap_remove(i)
            } else if let Some(w) = st.late.pop_front() {
                w
            } else {
                break;
            };
            if w.reply.is_closed() {
                continue; // the client went away while waiting
            }
            let load = (st.running + st.others) as f64;
            let late = st
                .model
                .predict_ms(w.demand, load)
                .is_some_and(|s| now + ms(s) > w.deadline.at);
            let refusable = refusable(&w.deadline, offered);
            if late && !refusable && !st.waiting.is_empty() {
                if let Some(m) = &self.metrics {
                    m.demoted();
                }
                st.late.push_back(w);
                continue;
            }
            if late && refusable {
                let waited = now.duration_since(w.arrived).as_secs_f64() * 1e3;
                let s = st.model.predict_ms(w.demand, load).unwrap_or(0.0);
                let refusal = self.refuse(&w.deadline, now, s, waited, true);
                out.push((w.reply, Err(refusal)));
                continue;
            }
            let permit = self.permit(st, w.deadline, w.demand, load, now);
            out.push((w.reply, Ok(permit)));
        }
        if let Some(m) = &self.metrics {
            m.show(&st.model, window, st.waiting.len() + st.late.len(), offered);
        }
        out
    }

    fn deliver(sends: Vec<(Reply, Result<Permit, Refusal>)>) {
        for (reply, result) in sends {
            // A receiver gone since the check above: the permit drops here, outside the lock.
            let _ = reply.send(result);
        }
    }
}

impl State {
    /// Brings the load integral up to `now` (before anything in flight changes).
    fn tick(&mut self, now: Instant) {
        if let Some(t) = self.area_until {
            let dt = now.saturating_duration_since(t).as_secs_f64() * 1e3;
            self.area += (self.running + self.others) as f64 * dt;
        }
        self.area_until = Some(now);
    }

    fn window(&self) -> usize {
        let d = typical_demand(self);
        let Some(base) = self.model.predict_ms(d, 0.0) else {
            return COLD_WINDOW;
        };
        let per_load = self.model.per_load_ms();
        let target = self.typical_budget_ms * SERVICE_SHARE;
        if per_load <= 1e-3 * base.max(1.0) {
            return MAX_WINDOW;
        }
        // The most calls at once such that one started among the others (load W − 1) still
        // takes at most the target. A fit's last decimals (17.9999 for 18) must not cost a
        // place.
        let extra = ((target - base) / per_load + 0.01).floor().max(0.0);
        ((extra as usize).saturating_add(1)).min(MAX_WINDOW)
    }

    /// Service time of a call started in a full window (the others in it as load).
    fn service_ms(&self, d: Demand, window: usize) -> Option<f64> {
        self.model.predict_ms(d, window.saturating_sub(1) as f64)
    }

    /// Latest start time of a call: its deadline less its predicted service at a full window.
    fn lst(&self, deadline: &Deadline, d: Demand, window: usize) -> Instant {
        let s = self.service_ms(d, window).unwrap_or(0.0);
        deadline.at.checked_sub(ms(s)).unwrap_or(deadline.at)
    }

    /// Predicted wait (ms from `now`) of a call with `ahead` calls ordered before it: places
    /// free up when the running calls are predicted to end (calls without a deadline, whose
    /// ends recache does not predict, half a service from now), and each call given a place
    /// holds it for a full window's service.
    fn wait_ms(&self, now: Instant, ahead: usize, window: usize) -> Option<f64> {
        let service = self.service_ms(typical_demand(self), window)?;
        let after = |t: Instant| t.saturating_duration_since(now).as_secs_f64() * 1e3;
        // Whole microseconds, so the heap orders integers.
        let us = |x: f64| (x.max(0.0) * 1e3) as u64;
        let mut free: BinaryHeap<Reverse<u64>> =
            self.ends.values().map(|&t| Reverse(us(after(t)))).collect();
        let open = window.saturating_sub(self.running);
        let others = self.others.min(open);
        free.extend((0..others).map(|_| Reverse(us(service / 2.0))));
        free.extend((0..open - others).map(|_| Reverse(0)));
        if free.is_empty() {
            free.push(Reverse(0));
        }
        for _ in 0..ahead {
            let Reverse(t) = free.pop()?;
            free.push(Reverse(t + us(service)));
        }
        free.pop().map(|Reverse(t)| t as f64 / 1e3)
    }

    fn learn_typical(&mut self, budget: Duration, d: Demand) {
        let b = budget.as_secs_f64() * 1e3;
        let (u, o) = (f64::from(d.uncached_tokens), f64::from(d.output_tokens));
        if self.typical_budget_ms == 0.0 {
            self.typical_budget_ms = b;
            self.typical = (u, o);
            return;
        }
        self.typical_budget_ms += 0.05 * (b - self.typical_budget_ms);
        self.typical.0 += 0.05 * (u - self.typical.0);
        self.typical.1 += 0.05 * (o - self.typical.1);
    }
}

/// Whether a call that cannot make its deadline is refused: always, unless it asked for best
/// effort and the replica keeps up (offered load below 1, see [`OfferedLoad`]).
fn refusable(d: &Deadline, offered: f64) -> bool {
    !d.best_effort || offered >= 1.0
}

fn typical_demand(st: &State) -> Demand {
    Demand {
        uncached_tokens: st.typical.0.round() as u32,
        output_tokens: st.typical.1.round() as u32,
    }
}

fn ms(x: f64) -> Duration {
    Duration::from_secs_f64(x.max(0.0) / 1e3)
}
