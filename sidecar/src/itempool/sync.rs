//! Adopting what the engine's pool already holds. The pool lives inside the engine and outlives
//! recache (a restart, a new deployment, a benchmark's next mode): its connector answers a
//! `{"recache_pool": {"list": true}}` request with every entry as `[key, first token, tokens]`,
//! and a pooled entry's first token is the label recache gave it. An entry whose label is one of
//! this pool's free label slots becomes resident again, without computing anything; any other
//! entry (a label outside this pool's range, or one already taken) is evicted from the engine
//! with the next request, since recache could never place it in a prompt.
//!
//! When a replica comes back into rotation (it may have been restarted, its pool empty), the
//! same list **reconciles** that replica's pool ([`ItemPool::resync`]): what recache took as
//! resident before asking, and the engine no longer lists, is forgotten at once (labels freed,
//! refilled when next wanted), instead of one ranking answer at a time.
//!
//! Each list also says whether the engine runs recache's pool at all: `/ready` shows per
//! replica `engine_pool` `loaded`, `missing` (an answer without a list) or `unknown`
//! ([`ItemPool::detail`]).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use serde_json::{Value, json};

use super::{Entry, ItemPool, Residency};
use crate::engine::{EngineError, EngineHandle};

/// One entry of the connector's list: key, label (first token), tokens.
pub type Listed = (String, u32, usize);

/// Reads the connector's `list` out of its report (`Engine::pool_report`); None when there is
/// no list (an engine without the pool).
pub fn read_list(report: &Value) -> Option<Vec<Listed>> {
    let list = report["list"].as_array()?;
    Some(
        list.iter()
            .filter_map(|e| {
                let key = e.get(0)?.as_str()?.to_string();
                let label = u32::try_from(e.get(1)?.as_u64()?).ok()?;
                let n = usize::try_from(e.get(2)?.as_u64()?).ok()?;
                Some((key, label, n))
            })
            .collect(),
    )
}

/// What [`ItemPool::reconcile`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Resident entries the engine still holds under the same label.
    pub kept: usize,
    /// Resident entries it no longer holds (forgotten; counted as `engine` evictions).
    pub forgotten: usize,
    /// Listed entries recache did not know, adopted or evicted as at start.
    pub adopted: usize,
    pub evicted: usize,
}

impl ItemPool {
    /// Takes `listed` as resident where its label is a free slot of this pool; returns
    /// (adopted, evicted).
    pub fn adopt(&self, listed: &[Listed]) -> (usize, usize) {
        let mut st = self.lock();
        let mut free: HashSet<u32> = st.free.iter().copied().collect();
        let (mut adopted, mut evicted) = (0, 0);
        for (key, label, _) in listed {
            if st.entries.contains_key(key) || !free.remove(label) {
                st.evict.push(key.clone());
                evicted += 1;
                continue;
            }
            st.entries.insert(
                key.clone(),
                Entry {
                    label: *label,
                    state: Residency::Resident(Instant::now()),
                    // As a precomputed item: requested once, so an item must be requested
                    // more often while serving before it displaces one of these.
                    count: 1,
                },
            );
            adopted += 1;
        }
        st.free.retain(|l| free.contains(l));
        self.gauges(&st);
        (adopted, evicted)
    }

    /// Evicts every resident entry whose key is not in `keep` (a benchmark resetting the pool
    /// to exactly its precomputed set); returns how many.
    pub fn retain_only(&self, keep: &HashSet<String>) -> usize {
        let mut st = self.lock();
        let gone: Vec<String> = st
            .entries
            .iter()
            .filter(|(k, e)| matches!(e.state, Residency::Resident(_)) && !keep.contains(*k))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &gone {
            st.forget(k);
        }
        st.evict.extend(gone.iter().cloned());
        self.gauges(&st);
        gone.len()
    }

    /// Makes residency match `listed`, the engine's list asked for at `asked`: resident
    /// entries since before `asked` that the list lacks (or holds under another label) are
    /// forgotten; listed entries recache does not know are [`adopt`](Self::adopt)ed. Entries
    /// that became resident after `asked`, and fills in flight, are left alone (the list may
    /// predate them).
    pub fn reconcile(&self, listed: &[Listed], asked: Instant) -> Reconciled {
        let held: HashMap<&str, u32> = listed.iter().map(|(k, l, _)| (k.as_str(), *l)).collect();
        let (forgotten, kept, unknown) = {
            let mut st = self.lock();
            let gone: Vec<String> = (st.entries.iter())
                .filter(|(k, e)| {
                    matches!(e.state, Residency::Resident(at) if at < asked)
                        && held.get(k.as_str()) != Some(&e.label)
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in &gone {
                st.forget(k);
            }
            let kept = (st.entries.values())
                .filter(|e| matches!(e.state, Residency::Resident(_)))
                .count();
            let unknown: Vec<Listed> = (listed.iter())
                .filter(|(k, _, _)| !st.entries.contains_key(k))
                .cloned()
                .collect();
            (gone.len(), kept, unknown)
        };
        (self.metrics.evictions.with_label_values(&["engine"])).inc_by(forgotten as u64);
        let (adopted, evicted) = self.adopt(&unknown);
        Reconciled {
            kept,
            forgotten,
            adopted,
            evicted,
        }
    }

    /// Asks the engine's connector what it holds and [`reconcile`](Self::reconcile)s with it
    /// (a replica that came back: it may have restarted empty).
    pub async fn resync(
        &self,
        engine: &EngineHandle,
        model: Option<&str>,
    ) -> Result<Reconciled, EngineError> {
        let asked = Instant::now();
        let listed = self.list(engine, model).await?;
        Ok(self.reconcile(&listed, asked))
    }

    /// Asks the engine's connector what it holds and adopts it; returns (adopted, evicted).
    pub async fn sync(
        &self,
        engine: &EngineHandle,
        model: Option<&str>,
    ) -> Result<(usize, usize), EngineError> {
        let listed = self.list(engine, model).await?;
        Ok(self.adopt(&listed))
    }

    /// The connector's list of what this pool's engine holds.
    async fn list(
        &self,
        engine: &EngineHandle,
        model: Option<&str>,
    ) -> Result<Vec<Listed>, EngineError> {
        let call = engine.dialect.pool_call(&[0], json!({"list": true}), model);
        let answer = self.post(engine, call).await?;
        let report = engine.dialect.pool_report(&answer);
        self.metrics.observe_report(self.index, report);
        self.read_engine_list(report)
    }

    /// The list in the connector's `report`, recording what it says of the engine's pool.
    fn read_engine_list(&self, report: &Value) -> Result<Vec<Listed>, EngineError> {
        let listed = read_list(report).ok_or_else(|| {
            EngineError::BadEngineAnswer(
                "the engine's answer has no item pool list: is it running recache's connector \
                 (testbed `up --item-pool`)?"
                    .into(),
            )
        });
        let seen = listed.as_ref().map(Vec::len).map_err(ToString::to_string);
        *self.engine_pool.lock().unwrap_or_else(|e| e.into_inner()) = Some(seen);
        listed
    }

    /// `/ready`'s view of this pool: whether its engine's pool is `loaded` (it answered the
    /// last `list`), `missing` (it answered without one: not running recache's connector or
    /// linker) or `unknown` (not asked yet), with its entries and recache's residency.
    pub fn detail(&self) -> Value {
        let (resident, pending) = self.counts();
        let mut out = json!({"resident": resident, "pending": pending});
        match &*self.engine_pool.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(Ok(n)) => {
                (out["engine_pool"], out["engine_entries"]) = (json!("loaded"), json!(n))
            }
            Some(Err(why)) => (out["engine_pool"], out["why"]) = (json!("missing"), json!(why)),
            None => out["engine_pool"] = json!("unknown"),
        }
        out
    }
}

#[cfg(test)]
#[path = "sync_tests.rs"]
mod tests;
