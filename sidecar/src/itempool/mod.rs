//! The item KV pool's meta service on recache's side: which items recache keeps resident in
//! the engine's pool (vLLM connector `recache_shim.item_pool`), their label tokens, admission
//! and eviction by item hotness, and what item-first prompts tell the connector.
//!
//! - Labels: a pooled item's KV includes its label token (the label introduces the item in the
//!   prompt and is what gets scored), so a pooled item keeps **one label for as long as it is
//!   resident**: slot s of the pool is token `label_base + max_items + s`. Items without a slot
//!   use the positional labels `label_base + k` as before; the two ranges never overlap, so
//!   every label of a prompt is distinct. Needs `label_base + max_items + items <= vocab`.
//! - Admission (BAT §5.2's hotness, the same counts as the hot-first order): an item seen in a
//!   request and not resident gets a slot if one is free, else if it has been requested more
//!   often than the coldest resident item, which is evicted. Fills run in the background
//!   ([`fill`]); a ranking request never waits for one.
//! - Truth is the connector's: each answer lists which of the request's items the engine's
//!   pool holds (`kv_transfer_params.recache_pool.present`); an item recache took as resident
//!   but the pool lacks (its budget dropped it) is forgotten and refilled when next wanted.
//! - Evictions travel in the next request's `kv_transfer_params` (`evict`).
//! - Fills while serving are bounded by `refresh_per_s` (a token bucket): an item that misses
//!   is computed inside its prompt anyway, so each fill is extra engine work, paid once more
//!   only for items hot enough to be admitted, and at a rate the operator chose. Filling the
//!   catalog ahead of time ([`precompute`]) is not bounded: it is what the pool is for.
//! - What the engine's pool already holds when recache starts (it outlives recache) is adopted
//!   from the connector's `list` ([`sync`]), labels and all; a replica that comes back into
//!   rotation (perhaps restarted empty) is reconciled with its list ([`resync`]).
//!
//! The pool talks to the engine through [`crate::engine::EngineHandle`] (client, dialect,
//! token cache), never through its users' state; ranking asks it, per request, what each
//! replica's pool holds of the candidates ([`replicas::Pools::held_on`]), builds the prompt,
//! and offers the candidates back ([`replicas::Pools::want`]).
//!
//! - [`config`]: the pool's flags; [`replicas`]: one pool per replica and placement;
//!   [`cold`]: items read from the store (`--rank-pool-store`); [`hrcs`]: BAT Alg. 1's
//!   replicated share, on [`costs`] measured while serving; [`store_probe`]: the store's
//!   reachability for `/ready`.
//! - [`fill`], [`precompute`], [`sync`], [`resync`], [`startup`], [`catalog`]: filling,
//!   adopting and reconciling the engines' pools.
//! - [`recompute`]: what pooled prompts compute again in context (`--rank-pool-recompute`).
//! - [`metrics`]: the pool's Prometheus series.

pub mod catalog;
pub mod cold;
pub mod config;
pub mod costs;
pub mod fill;
pub mod hrcs;
pub mod metrics;
pub mod precompute;
pub mod recompute;
pub mod replicas;
pub mod resync;
pub mod startup;
pub mod store_probe;
pub mod sync;

pub use config::PoolConfig;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Residency {
    /// A fill was sent (or is queued).
    Pending,
    /// The fill answered at this time.
    Resident(Instant),
}

#[derive(Debug)]
struct Entry {
    label: u32,
    state: Residency,
    /// Requests the item appeared in, as of the last request that had it.
    count: u64,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    free: Vec<u32>,
    evict: Vec<String>,
    pending: usize,
    /// Refresh fills that may start now, and when it was last topped up.
    bucket: f64,
    topped: Option<Instant>,
}

impl State {
    /// Drops `key`'s entry and frees its label slot; whether there was one.
    fn forget(&mut self, key: &str) -> bool {
        let Some(e) = self.entries.remove(key) else {
            return false;
        };
        self.free.push(e.label);
        true
    }

    /// Takes up to `want` refresh fills from the bucket (`rate` per second, one second of
    /// burst); `rate <= 0` is unbounded.
    fn take_refills(&mut self, rate: f64, want: usize) -> usize {
        if rate.is_nan() || rate <= 0.0 {
            return want; // 0 (or a NaN that slipped through) = unbounded, never stuck
        }
        let now = Instant::now();
        let elapsed = self
            .topped
            .map_or(1.0, |t| now.duration_since(t).as_secs_f64());
        self.topped = Some(now);
        self.bucket = (self.bucket + elapsed * rate).min(rate.max(1.0));
        let n = (self.bucket.floor() as usize).min(want);
        self.bucket -= n as f64;
        n
    }
}

/// What one item-first prompt sends to the connector.
#[derive(Debug, Clone)]
pub struct PoolUse {
    /// Pool keys of the prompt's items, in prompt order.
    pub keys: Vec<String>,
    /// The request's `kv_transfer_params`.
    pub params: Value,
    pub sent: Instant,
}

/// An item a request would like resident: pool key, hotness, token ids.
pub struct Wanted {
    pub key: String,
    pub count: u64,
    pub tokens: Arc<Vec<u32>>,
}

/// One engine's item pool as recache keeps it (with several replicas, one per replica:
/// [`replicas::Pools`]).
pub struct ItemPool {
    pub config: PoolConfig,
    state: Mutex<State>,
    filler: fill::Filler,
    pub metrics: Arc<metrics::PoolMetrics>,
    /// This pool's index among the replicas' pools (its share of the gauges).
    pub index: usize,
    /// The replica whose engine holds this pool: fills and the `list` go to it alone. None
    /// with one replica (calls go through the routing rule, which has only it).
    pub target: Option<usize>,
    /// This pool's own fills (the metrics add up every replica's): ok, failed, tokens.
    own_fills: [std::sync::atomic::AtomicU64; 3],
    /// The engine's answer to the last `list`: its entries, or why it has no pool (None:
    /// not asked yet). `/ready` shows it ([`sync`]).
    engine_pool: Mutex<Option<Result<usize, String>>>,
}

/// The pool key of an item: model and the item's id as sent (JSON text).
pub fn key(model: Option<&str>, item: &str) -> String {
    format!("{}/{item}", model.unwrap_or(""))
}

impl ItemPool {
    /// `first_label` = the rank label base + the most candidates per request.
    pub fn new(config: PoolConfig, first_label: u32, metrics: Arc<metrics::PoolMetrics>) -> Self {
        let free = (0..config.items as u32)
            .rev()
            .map(|s| first_label + s)
            .collect();
        Self {
            filler: fill::Filler::new(config.fills),
            config,
            state: Mutex::new(State {
                free,
                ..Default::default()
            }),
            metrics,
            index: 0,
            target: None,
            own_fills: Default::default(),
            engine_pool: Mutex::default(),
        }
    }

    /// This pool's fills so far: (answered ok, failed, tokens computed).
    pub fn fills_done(&self) -> (u64, u64, u64) {
        let [ok, err, tokens] = &self.own_fills;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        (get(ok), get(err), get(tokens))
    }

    /// The pool of replica `index`, reached at that replica only when `pinned`.
    pub fn on_replica(mut self, index: usize, pinned: bool) -> Self {
        self.index = index;
        self.target = pinned.then_some(index);
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A poisoned lock means a panic mid-update; the map is still consistent per entry.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pool label of each key that has a slot (resident or being filled).
    pub fn labels(&self, keys: &[String]) -> Vec<Option<u32>> {
        let st = self.lock();
        keys.iter()
            .map(|k| st.entries.get(k).map(|e| e.label))
            .collect()
    }

    /// Each key's label and whether it is resident, under one lock (None: no slot).
    pub fn slots(&self, keys: &[String]) -> Vec<Option<(u32, bool)>> {
        let st = self.lock();
        keys.iter()
            .map(|k| {
                (st.entries.get(k)).map(|e| (e.label, matches!(e.state, Residency::Resident(_))))
            })
            .collect()
    }

    /// Which keys are resident (filled and not known to be gone).
    pub fn resident(&self, keys: &[String]) -> Vec<bool> {
        let st = self.lock();
        keys.iter()
            .map(|k| {
                matches!(
                    st.entries.get(k).map(|e| e.state),
                    Some(Residency::Resident(_))
                )
            })
            .collect()
    }

    /// The `kv_transfer_params` of a prompt whose item segments (label + item tokens) start
    /// at token `at` (0 item-first; a user-first prompt's whole-block profile length) with the
    /// given lengths, in prompt order. The first `resident`
    /// are the pooled run; `link` tokens (the recompute setting's, computed in context) follow
    /// it, so later segments start that much later. Each segment's `pos` is where `spec`
    /// puts its K in RoPE position space (`at`: the shared start of the items). `cold` are
    /// the keys of the run another replica's pool holds: the connector reads them from the
    /// store (`"cold"`, sent only when there are some).
    #[allow(clippy::too_many_arguments)]
    pub fn request(
        &self,
        keys: Vec<String>,
        lens: &[usize],
        at: usize,
        resident: usize,
        link: usize,
        spec: recompute::RecomputeSpec,
        cold: Vec<String>,
    ) -> PoolUse {
        let mut start = at;
        let segments: Vec<Value> = (keys.iter().zip(lens).enumerate())
            .map(|(i, (k, &n))| {
                if i == resident {
                    start += link;
                }
                let s = if spec.true_positions || at > 0 {
                    json!([k, start, n, spec.segment_pos(start).max(at)])
                } else {
                    json!([k, start, n])
                };
                start += n;
                s
            })
            .collect();
        let evict = std::mem::take(&mut self.lock().evict);
        let mut params = json!({"recache_pool": {"segments": segments, "evict": evict}});
        if !cold.is_empty() {
            self.metrics.cold_items.inc_by(cold.len() as u64);
            params["recache_pool"]["cold"] = json!(cold);
        }
        PoolUse {
            keys,
            params,
            sent: Instant::now(),
        }
    }

    /// Admits what it should of `wanted` (hottest first) within the refresh rate and returns
    /// the fills to send: (key, label, tokens).
    pub fn admit(&self, wanted: Vec<Wanted>) -> Vec<(String, u32, Arc<Vec<u32>>)> {
        self.admit_within(wanted, true)
    }

    /// [`admit`](Self::admit); `bounded: false` ignores the refresh rate (precomputing).
    fn admit_within(
        &self,
        mut wanted: Vec<Wanted>,
        bounded: bool,
    ) -> Vec<(String, u32, Arc<Vec<u32>>)> {
        wanted.sort_by_key(|w| std::cmp::Reverse(w.count));
        let mut st = self.lock();
        let mut fills = Vec::new();
        let in_request: HashSet<String> = wanted.iter().map(|w| w.key.clone()).collect();
        let missing = wanted
            .iter()
            .filter(|w| !st.entries.contains_key(&w.key))
            .count();
        let mut budget = if bounded {
            st.take_refills(self.config.refresh_per_s, missing)
        } else {
            missing
        };
        for w in wanted {
            if let Some(e) = st.entries.get_mut(&w.key) {
                e.count = w.count;
                continue;
            }
            if st.pending >= self.config.max_pending || budget == 0 {
                if budget == 0 && missing > 0 {
                    self.metrics.refills_deferred.inc();
                }
                break;
            }
            budget -= 1;
            let label = match st.free.pop() {
                Some(l) => l,
                None => match self.coldest(&st, w.count, &in_request) {
                    Some(victim) => {
                        let Some(e) = st.entries.remove(&victim) else {
                            break;
                        };
                        if e.state == Residency::Pending {
                            st.pending -= 1;
                        }
                        st.evict.push(victim);
                        self.metrics.evictions.with_label_values(&["hotness"]).inc();
                        e.label
                    }
                    None => break, // nothing colder: the rest are colder still
                },
            };
            st.entries.insert(
                w.key.clone(),
                Entry {
                    label,
                    state: Residency::Pending,
                    count: w.count,
                },
            );
            st.pending += 1;
            fills.push((w.key, label, w.tokens));
        }
        self.gauges(&st);
        fills
    }

    /// The least requested resident item colder than `count`, not one of this request's.
    fn coldest(&self, st: &State, count: u64, keep: &HashSet<String>) -> Option<String> {
        st.entries
            .iter()
            .filter(|(k, e)| matches!(e.state, Residency::Resident(_)) && !keep.contains(*k))
            .filter(|(_, e)| e.count < count)
            .min_by(|a, b| a.1.count.cmp(&b.1.count).then_with(|| a.0.cmp(b.0)))
            .map(|(k, _)| k.clone())
    }

    /// Admits what it should of `wanted` and fills it in the background; returns at once.
    pub fn want(
        self: &Arc<Self>,
        engine: &Arc<crate::engine::EngineHandle>,
        model: Option<&str>,
        wanted: Vec<Wanted>,
    ) {
        let fills = self.admit(wanted);
        if !fills.is_empty() {
            self.filler
                .spawn(engine, self, model.map(str::to_string), fills);
        }
    }

    /// (resident, pending) items.
    pub fn counts(&self) -> (usize, usize) {
        let st = self.lock();
        (st.entries.len() - st.pending, st.pending)
    }

    pub fn requeue_evictions(&self, keys: Vec<String>) {
        self.lock().evict.extend(keys);
    }

    /// Evictions not sent yet (they ride on the next request to the engine).
    pub fn take_evictions(&self) -> Vec<String> {
        std::mem::take(&mut self.lock().evict)
    }

    /// A fill answered: the item is resident (ok) or its slot is given back. `tokens`: what
    /// the fill computed (label + item).
    pub fn filled(&self, key: &str, label: u32, ok: bool, tokens: usize) {
        let mut st = self.lock();
        let ours = st.entries.get(key).is_some_and(|e| e.label == label);
        if ours
            && st
                .entries
                .get(key)
                .is_some_and(|e| e.state == Residency::Pending)
        {
            st.pending -= 1;
        }
        if ours && ok {
            if let Some(e) = st.entries.get_mut(key) {
                e.state = Residency::Resident(Instant::now());
            }
        } else if ours {
            st.entries.remove(key);
            st.free.push(label);
        }
        let result = if ok { "ok" } else { "error" };
        self.metrics.fills.with_label_values(&[result]).inc();
        let add =
            |i: usize, n: u64| self.own_fills[i].fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        if ok {
            self.metrics.fill_tokens.inc_by(tokens as u64);
            add(0, 1);
            add(2, tokens as u64);
        } else {
            add(1, 1);
        }
        self.gauges(&st);
    }

    /// Reads the connector's report in a scoring answer: items recache took as resident since
    /// before the request was sent, but which the engine's pool does not hold, are forgotten.
    pub fn observe(&self, used: &PoolUse, report: &Value) {
        let Some(present) = report["present"].as_array() else {
            self.metrics.unreported.inc();
            return;
        };
        let present: HashSet<&str> = present.iter().filter_map(Value::as_str).collect();
        let m = &self.metrics;
        m.observe_report(self.index, report);
        let mut st = self.lock();
        let mut hits = 0;
        for k in &used.keys {
            if present.contains(k.as_str()) {
                hits += 1;
                continue;
            }
            let stale = matches!(
                st.entries.get(k).map(|e| e.state),
                Some(Residency::Resident(at)) if at < used.sent
            );
            if stale && st.forget(k) {
                m.evictions.with_label_values(&["engine"]).inc();
            }
        }
        m.present_items.inc_by(hits);
        m.requested_items.inc_by(used.keys.len() as u64);
        self.gauges(&st);
    }

    fn gauges(&self, st: &State) {
        let resident = st.entries.len() - st.pending;
        self.metrics.set_counts(self.index, resident, st.pending);
    }
}

#[cfg(test)]
mod tests;
