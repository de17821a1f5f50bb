//! One item pool per engine replica, and which replica's pool holds which item.
//!
//! Each engine's connector keeps its own pool, so with several `--upstream`s recache keeps one
//! [`ItemPool`] per replica (same index as the engine client's replicas): its own labels,
//! residency and evictions, fills and the `list` sent to that replica alone. A prompt built
//! for one replica's pool is sent to that replica (the rank pipeline pins it).
//!
//! **Placement** (BAT §5.2, Alg. 1): an item is pooled on replica `r` when it is hot (hot
//! items are replicated) or when `r` is its home ([`placement::home`] of the item id over
//! the replicas' labels: the same answer from every recache instance). The hot set covers
//! a share of item accesses ([`Pools::hot_share`]): the `gr` rule's `pool_hot_share` when set;
//! without a store (`--rank-pool-store`) 1, every item replicated, since recache has then no
//! path for KV between replicas and a request finds only the items its own replica pooled
//! (docs/routing.md has the numbers for a share below 1); with one, `1 − R_max` from Alg. 1
//! on measured costs ([`hrcs`]), an item any replica's pool holds being served to the others
//! from the store ([`super::cold`]). With a store the precompute also places the hottest
//! items that fit, each at its home while the home has room and else where there is room, so
//! that together the pools hold the hottest items (homes alone left one pool 52 slots empty
//! in one of docs/store.md's runs).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::precompute::{PrecomputeError, Precomputed};
use super::{ItemPool, PoolConfig, Wanted, cold, costs, hrcs, metrics::PoolMetrics};
use crate::engine::{EngineError, EngineHandle};
use recache_hash::placement;

/// The replicas' pools.
pub struct Pools {
    per: Vec<Arc<ItemPool>>,
    /// [`placement::replica_id`] of each replica's label, by index.
    replica_ids: Vec<u64>,
    pub metrics: Arc<PoolMetrics>,
    /// The ranked requests' shape, for Alg. 1 ([`Self::hot_share`]).
    pub shape: hrcs::Shape,
    /// Alg. 1's costs in use: the flag's, else measured while serving ([`costs`]).
    pub costs: costs::LiveCosts,
}

impl Pools {
    /// One pool per replica label (`labels`, the engine client's replicas in order).
    pub fn new(
        config: &PoolConfig,
        first_label: u32,
        metrics: PoolMetrics,
        labels: &[String],
    ) -> Self {
        let metrics = Arc::new(metrics);
        let n = labels.len().max(1);
        // With a store, a prompt may carry items another replica's pool filled, with that
        // pool's labels: each pool then takes its own label range, so the labels of one
        // prompt stay distinct whichever pools its items come from.
        let per = (0..n)
            .map(|i| {
                let first = first_label + cold::label_offset(config, n, i);
                let p = ItemPool::new(config.clone(), first, metrics.clone());
                Arc::new(p.on_replica(i, n > 1))
            })
            .collect();
        Self {
            per,
            replica_ids: labels.iter().map(|l| placement::replica_id(l)).collect(),
            metrics,
            shape: hrcs::Shape::default(),
            costs: costs::LiveCosts::new(config.costs, config.costs_given),
        }
    }

    /// The share of item accesses every pool replicates: `set` (`gr:pool_hot_share`) when
    /// given; else, with a store and several replicas, BAT's Alg. 1 on the costs in use (the
    /// flag's or measured, [`costs`]) and the requests ranked so far (`item_tokens`: an
    /// item's mean tokens before any); else 1 (a request can use only its own replica's pool).
    pub fn hot_share(&self, set: Option<f64>, item_tokens: f64) -> f64 {
        let share = match set {
            Some(p) => p,
            None if self.has_store() && self.per.len() > 1 => {
                let costs = self.costs.get();
                hrcs::hot_share(&costs, self.shape.mean(item_tokens), self.per.len())
            }
            None => 1.0,
        };
        self.metrics.hot_share.set(share);
        share
    }

    pub fn len(&self) -> usize {
        self.per.len()
    }

    pub fn is_empty(&self) -> bool {
        self.per.is_empty()
    }

    /// Replica `i`'s pool (the first one for an index out of range).
    pub fn get(&self, i: usize) -> &Arc<ItemPool> {
        self.per.get(i).unwrap_or(&self.per[0])
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<ItemPool>> {
        self.per.iter()
    }

    /// Whether replica `r` pools an item with placement id `id` that is `hot` or not.
    pub fn placed(&self, r: usize, id: u64, hot: bool) -> bool {
        hot || self.per.len() < 2 || placement::home_of(id, &self.replica_ids, |_| true) == Some(r)
    }

    /// Offers a request's candidates to every replica's pool: each takes those placed on it
    /// (`hot[i]` says whether `wanted[i]` is replicated) and fills them in the background.
    pub fn want(
        &self,
        engine: &Arc<EngineHandle>,
        model: Option<&str>,
        wanted: Vec<Wanted>,
        hot: &[bool],
    ) {
        if self.per.len() == 1 {
            self.per[0].want(engine, model, wanted);
            return;
        }
        let ids: Vec<u64> = wanted.iter().map(|w| id_of(&w.key)).collect();
        for (r, pool) in self.per.iter().enumerate() {
            let mine = (wanted.iter().enumerate())
                .filter(|(i, _)| self.placed(r, ids[*i], hot.get(*i).copied().unwrap_or(true)))
                .map(|(_, w)| Wanted {
                    key: w.key.clone(),
                    count: w.count,
                    tokens: w.tokens.clone(),
                })
                .collect();
            pool.want(engine, model, mine);
        }
    }

    /// What each replica's pool precomputes of `items` (hottest first): hot items everywhere,
    /// each other item at its home. With a store every pool's items reach every replica, so
    /// the pools take the hottest items that fit, each at its home while the home has room and
    /// else where there is room (together they then hold the hottest items, as replicate-all's
    /// pools do); without one, homes only (an item elsewhere serves only prompts that land
    /// there).
    fn shares(&self, items: &[Wanted], hot_share: f64) -> Vec<Vec<Wanted>> {
        let threshold =
            placement::hot_threshold(items.iter().map(|w| w.count).collect(), hot_share);
        let n = self.per.len();
        let copy = |w: &Wanted| Wanted {
            key: w.key.clone(),
            count: w.count,
            tokens: w.tokens.clone(),
        };
        let mut shares: Vec<Vec<Wanted>> = (0..n).map(|_| Vec::new()).collect();
        if !self.has_store() {
            for w in items {
                let (id, hot) = (id_of(&w.key), w.count >= threshold);
                for (r, share) in shares.iter_mut().enumerate() {
                    if self.placed(r, id, hot) {
                        share.push(copy(w));
                    }
                }
            }
            return shares;
        }
        // Hottest first, each into its place while it has room: a hot item into every pool, a
        // cold one into its home, else into the pool with the most room left.
        let mut room: Vec<usize> = self.per.iter().map(|p| p.config.items).collect();
        for w in items {
            if room.iter().all(|&r| r == 0) {
                break;
            }
            let id = id_of(&w.key);
            if w.count >= threshold {
                for (r, share) in shares.iter_mut().enumerate() {
                    if room[r] > 0 {
                        share.push(copy(w));
                        room[r] -= 1;
                    }
                }
                continue;
            }
            let home = placement::home_of(id, &self.replica_ids, |_| true).unwrap_or(0);
            let r = if room.get(home).is_some_and(|&r| r > 0) {
                home
            } else {
                (0..n)
                    .max_by_key(|&r| (room[r], std::cmp::Reverse(r)))
                    .unwrap_or(0)
            };
            shares[r].push(copy(w));
            room[r] -= 1;
        }
        shares
    }

    /// Every replica's [`ItemPool::sync`]; returns (adopted, evicted) summed.
    pub async fn sync(
        &self,
        engine: &EngineHandle,
        model: Option<&str>,
    ) -> Result<(usize, usize), EngineError> {
        let (mut adopted, mut evicted) = (0, 0);
        for p in &self.per {
            let (a, e) = p.sync(engine, model).await?;
            adopted += a;
            evicted += e;
        }
        Ok((adopted, evicted))
    }

    /// Every replica's [`ItemPool::retain_only`]; returns how many were evicted in all.
    pub fn retain_only(&self, keep: &HashSet<String>) -> usize {
        self.per.iter().map(|p| p.retain_only(keep)).sum()
    }

    /// Precomputes `items` (hottest first) into the replicas' pools: the first ones covering
    /// [`Self::hot_share`] of the items' counts (`set`: `gr:pool_hot_share`) on every replica,
    /// the others once ([`Self::shares`]). The pools fill side by side; `progress` gets
    /// (done, total) over all of them.
    pub async fn precompute(
        &self,
        engine: &Arc<EngineHandle>,
        model: Option<&str>,
        items: Vec<Wanted>,
        set: Option<f64>,
        limit: Duration,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<Precomputed, PrecomputeError> {
        let item_tokens = (items.iter().map(|w| w.tokens.len()).sum::<usize>() as f64)
            / items.len().max(1) as f64;
        let hot_share = self.hot_share(set, item_tokens);
        if self.per.len() == 1 {
            return self.per[0]
                .precompute(engine, model, items, limit, progress)
                .await;
        }
        tracing::info!(
            hot_share,
            store = self.has_store(),
            "item pools: replicated share"
        );
        let shares = self.shares(&items, hot_share);
        // Each pool fills from a task of its own; their progress comes back by channel.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, usize, usize)>();
        let mut runs = tokio::task::JoinSet::new();
        for (r, (pool, share)) in self.per.iter().zip(shares).enumerate() {
            let (pool, engine, tx) = (pool.clone(), engine.clone(), tx.clone());
            let model = model.map(str::to_string);
            runs.spawn(async move {
                let show = move |d: usize, t: usize| {
                    let _ = tx.send((r, d, t)); // the receiver outlives every run
                };
                pool.precompute(&engine, model.as_deref(), share, limit, &show)
                    .await
            });
        }
        drop(tx);
        // Forwarded once every pool has said its total (each does as it starts).
        let mut seen: Vec<Option<(usize, usize)>> = vec![None; self.per.len()];
        while let Some((r, d, t)) = rx.recv().await {
            seen[r] = Some((d, t));
            if seen.iter().all(Option::is_some) {
                let (d, t) = (seen.iter().flatten()).fold((0, 0), |a, x| (a.0 + x.0, a.1 + x.1));
                progress(d, t);
            }
        }
        let mut results = Vec::new();
        while let Some(joined) = runs.join_next().await {
            results.push(joined.map_err(|e| PrecomputeError::Task(e.to_string()))?);
        }
        let mut sum = Precomputed::default();
        for r in results {
            let r = r?;
            sum.filled += r.filled;
            sum.tokens += r.tokens;
            sum.resident += r.resident;
            sum.seconds = sum.seconds.max(r.seconds);
        }
        Ok(sum)
    }
}

/// The placement id of a pool key (`model/item`): the item id's, as the routing rule hashes
/// it.
pub fn id_of(key: &str) -> u64 {
    let item = key.split_once('/').map_or(key, |(_, item)| item);
    placement::id(item)
}

/// Tests' pools: `n` replicas at 127.0.0.1:9000.., `items` slots each, first pool label 1000,
/// optionally a store.
#[cfg(test)]
#[path = "replicas_tests.rs"]
pub(crate) mod tests;
