//! What the benchmarks (the `recache-bench` crate) drive recache with, in one place: that crate
//! imports nothing of this library but this module, so what a benchmark may depend on is
//! listed here and changes to it show up here.
//!
//! - Running recache in this process: [`LocalServer`] with the settings types it starts from
//!   ([`ServeArgs`], [`RankArgs`], [`KvLoopArgs`], [`RetrieveArgs`], [`Routing`]), and read-only
//!   views of the running server ([`LocalServer::rank_counters`],
//!   [`LocalServer::pending_fills`], [`LocalServer::mirrors`], ...) so that a benchmark need not
//!   reach through `AppState`'s fields.
//! - The defaults a benchmark must agree with (`DEFAULT_*`).
//! - The pure parts a benchmark computes with recache's own code, so it measures what recache
//!   does: the shadow's eviction policies
//!   ([`build_policy`]), routing decisions ([`route`]), ranking requests' rewriting
//!   ([`rank_api`], [`rank_pipeline`], [`rank_trace`]), the retrieval index and its file
//!   format (the offline builder, `recache items index`, is the benchmark crate's).

use std::path::PathBuf;
use std::sync::Arc;

pub use crate::client::mirror::MirrorState;
pub use crate::client::replica::Replica;
pub use crate::client::route::{self, GrHint, RouteHint, RouteKeys, Routing};
pub use crate::config::ServeArgs;
pub use crate::itempool::config::PoolArgs;
pub use crate::itempool::recompute::RecomputeSpec;
pub use crate::itempool::replicas::Pools;
pub use crate::itempool::{Wanted, key as pool_key};
pub use crate::kvloop::config::KvLoopArgs;
pub use crate::kvloop::metrics::Phase;
pub use crate::kvloop::shadow::build_policy;
pub use crate::kvloop::shim_status;
pub use crate::local::{LocalError, LocalServer};
pub use crate::rank::config::{
    Admission, DEFAULT_INSTRUCTION, DEFAULT_LABEL_BASE, DEFAULT_USER_CACHE_TOKENS, ItemReuse,
    RankArgs, SelectorKind,
};
pub use crate::rank::readout::Readout;
pub use crate::rank::select::PrefixKind;
pub use crate::rank::startup::check_labels;
pub use crate::rank::vocab::Verdict;
pub use crate::rank::{Ranker, TRACE_BLOCK_TOKENS};
pub use crate::rank::{api as rank_api, pipeline as rank_pipeline, trace as rank_trace};
pub use crate::retrieve::config::RetrieveArgs;
pub use crate::retrieve::engine::DEFAULT_INSTRUCTION as RETRIEVE_INSTRUCTION;
pub use crate::retrieve::index::{
    FORMAT as INDEX_FORMAT, IndexError, IndexFile, IndexedItem, MAX_CHILDREN, RetrieveIndex,
};
pub use crate::retrieve::search::join_all;

/// recache's own ranking counters, read in process: where a ranking request's time went.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct RankCounters {
    /// Seconds in `/v1/rank` in all, and of those waiting for the engine.
    pub rank_s: f64,
    pub engine_s: f64,
    /// Item pool (0 without one): tokens its fills computed, connector seconds loading pooled
    /// K/V into requests and capturing fills.
    pub fill_tokens: u64,
    pub load_s: f64,
    pub fill_s: f64,
}

/// One replica's routing mirror, as a benchmark reports it.
#[derive(Debug, Clone)]
pub struct MirrorView {
    /// The replica's label in metrics (its upstream).
    pub label: String,
    pub state: MirrorState,
    /// Why it is in that state.
    pub why: String,
}

impl LocalServer {
    /// The Prometheus text of this server's `/metrics`.
    pub fn metrics_text(&self) -> String {
        String::from_utf8_lossy(&self.state.metrics.render()).into_owned()
    }

    /// The ranking state (item pools, rewriting), for benchmarks that drive it directly.
    pub fn ranker(&self) -> &Arc<Ranker> {
        &self.state.ranker
    }

    /// The replicas' item pools (`--rank-item-pool`), if on.
    pub fn pools(&self) -> Option<&Pools> {
        self.state.ranker.rank.pool.as_deref()
    }

    /// The ranking counters so far.
    pub fn rank_counters(&self) -> RankCounters {
        let rank = &self.state.ranker.rank;
        let mut c = RankCounters {
            rank_s: rank.metrics.total_seconds.get(),
            engine_s: rank.metrics.engine_seconds.get(),
            ..Default::default()
        };
        if let Some(p) = &rank.pool {
            c.fill_tokens = p.metrics.fill_tokens.get();
            c.load_s = p.metrics.engine_load_seconds.get();
            c.fill_s = p.metrics.engine_fill_seconds.get();
        }
        c
    }

    /// Item pool fills still in flight, over every replica's pool (0 without a pool).
    pub fn pending_fills(&self) -> usize {
        let pools = self.state.ranker.rank.pool.as_ref();
        pools.map_or(0, |p| p.iter().map(|p| p.counts().1).sum())
    }

    /// Writes out `--rank-trace-out`'s buffered lines; the trace's path, or None without one.
    pub fn flush_rank_trace(&self) -> Option<Result<PathBuf, std::io::Error>> {
        let sink = self.state.ranker.rank.trace.as_ref()?;
        Some(sink.flush().map(|_| sink.path().to_path_buf()))
    }

    /// Whether the engine loop has received the engine's KV events (false without one).
    pub fn kv_events_seen(&self) -> bool {
        (self.state.kvloop.as_ref()).is_some_and(|k| k.resident().is_some())
    }

    /// The routing strategy in use, and a new one.
    pub fn routing(&self) -> Routing {
        self.state.client.routing()
    }

    pub fn set_routing(&self, routing: Routing) {
        self.state.client.set_routing(routing);
    }

    /// Every replica's state as `/health`'s detail reports it.
    pub fn replica_detail(&self) -> Vec<serde_json::Value> {
        self.state.client.replica_detail()
    }

    /// Every replica's routing mirror.
    pub fn mirrors(&self) -> Vec<MirrorView> {
        (self.state.client.replicas().iter())
            .map(|r| MirrorView {
                label: r.label.clone(),
                state: r.mirror.state(),
                why: r.mirror.why(),
            })
            .collect()
    }
}
