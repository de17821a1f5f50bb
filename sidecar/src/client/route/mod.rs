//! Where a request goes: the one place a replica is chosen.
//!
//! A [`ReplicaChoice`] sees the replica set and what the client knows about the request
//! ([`RouteHint`]) and names one replica. The rules, one file each: [`least_loaded`]
//! (fewest outstanding requests, blind to caches), [`prefix`] (where the prompt's prefix
//! was sent, traded against load) and [`gr`] (`prefix`, plus each GR side's placement:
//! [`recache_hash::placement`]). [`Routing`] names them (configuration, the admin API) and
//! [`build`] is the one factory; the client swaps rules atomically ([`RouteSlot`]).

pub mod gr;
pub mod keys;
pub mod least_loaded;
pub mod prefix;
pub mod sent;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use self::gr::GrHint;
pub use self::keys::RouteKeys;
use super::replica::Replica;

static NO_KEYS: RouteKeys = RouteKeys {
    keys: Vec::new(),
    tokens: 0,
    token_ids: false,
};

/// What is known about a request when its replica is chosen.
#[derive(Debug, Clone, Copy)]
pub struct RouteHint<'a> {
    /// The engine route, e.g. `/v1/completions`.
    pub path: &'a str,
    /// The prompt's route keys (empty unless the rule [`ReplicaChoice::wants_keys`] and the
    /// body has a prompt).
    pub keys: &'a RouteKeys,
    /// A GR ranking prompt's sides (only the `gr` rule reads it).
    pub gr: Option<&'a GrHint>,
}

impl<'a> RouteHint<'a> {
    /// A request to `path` with route keys `keys` and no GR hint.
    pub fn new(path: &'a str, keys: &'a RouteKeys) -> Self {
        Self {
            path,
            keys,
            gr: None,
        }
    }
}

impl Default for RouteHint<'_> {
    fn default() -> Self {
        Self::new("", &NO_KEYS)
    }
}

/// A replica-choice rule.
pub trait ReplicaChoice: Send + Sync + std::fmt::Debug {
    /// Index into `replicas` of a healthy replica not in `tried` (indices already attempted
    /// for this request), or None when none is left.
    fn choose(
        &self,
        replicas: &[Arc<Replica>],
        tried: &[usize],
        hint: &RouteHint<'_>,
    ) -> Option<usize>;

    /// Whether the rule reads [`RouteHint::keys`] (the pipeline only hashes prompts then).
    fn wants_keys(&self) -> bool {
        false
    }

    /// Replica `index` came back into rotation (it may have restarted with an empty cache):
    /// forget what the rule knew of it.
    fn forget(&self, _index: usize) {}
}

/// The rules there are, by name, with their parameters (configuration, admin API, factory).
/// On the command line: `NAME` or `NAME:key=value:key=value`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "routing", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Routing {
    /// Fewest outstanding requests among healthy replicas, ties round-robin.
    #[default]
    #[serde(alias = "least-outstanding")]
    LeastLoaded,
    /// The replica holding most of the prompt's prefix, traded against load ([`prefix`]).
    Prefix {
        /// Route keys remembered per replica (32 tokens each).
        #[serde(default = "default_blocks")]
        blocks: usize,
        /// Seconds after which an unsent key is taken to be evicted.
        #[serde(default = "default_ttl_s")]
        ttl_s: f64,
        /// Allowed excess of a replica's recent request share over the mean.
        #[serde(default = "default_balance")]
        balance: f64,
        /// Outstanding-request gap past which the least loaded replica wins regardless of
        /// cache.
        #[serde(default = "default_queue_gap")]
        queue_gap: usize,
    },
    /// `prefix` for ranking prompts with user / item placement ([`gr`]).
    Gr {
        #[serde(default = "default_blocks")]
        blocks: usize,
        #[serde(default = "default_ttl_s")]
        ttl_s: f64,
        #[serde(default = "default_balance")]
        balance: f64,
        #[serde(default = "default_queue_gap")]
        queue_gap: usize,
        /// Share of item accesses the replicated (hot) items cover; the rest are sharded.
        #[serde(default = "default_hot_share")]
        hot_share: f64,
        /// The same for the item KV pools (`--rank-item-pool`, one per replica): items
        /// covering this share of accesses are pooled on every replica, the rest once. Unset
        /// (default): 1 without a store (every replica pools by hotness alone, since a request
        /// can use only its own replica's pool), BAT's Alg. 1 on `--rank-pool-costs` with
        /// one (`itempool::hrcs`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool_hot_share: Option<f64>,
    },
}

fn default_blocks() -> usize {
    65_536
}
fn default_ttl_s() -> f64 {
    600.0
}
fn default_balance() -> f64 {
    0.3
}
fn default_queue_gap() -> usize {
    8
}
fn default_hot_share() -> f64 {
    0.5
}

/// A routing spec that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error(
    "routing {spec:?}: {why} (rules: least-loaded, prefix[:blocks=N][:ttl_s=S][:balance=B][:queue_gap=G], gr[:hot_share=H][:pool_hot_share=P][:<prefix's keys>])"
)]
pub struct BadRouting {
    pub spec: String,
    pub why: String,
}

impl Routing {
    pub const NAMES: [&'static str; 3] = ["least-loaded", "prefix", "gr"];

    /// The default `prefix` rule.
    pub fn prefix() -> Self {
        Self::Prefix {
            blocks: default_blocks(),
            ttl_s: default_ttl_s(),
            balance: default_balance(),
            queue_gap: default_queue_gap(),
        }
    }

    /// The default `gr` rule.
    pub fn gr() -> Self {
        Self::Gr {
            blocks: default_blocks(),
            ttl_s: default_ttl_s(),
            balance: default_balance(),
            queue_gap: default_queue_gap(),
            hot_share: default_hot_share(),
            pool_hot_share: None,
        }
    }

    /// `prefix`'s parameters, shared by `prefix` and `gr` (None for `least-loaded`).
    pub fn prefix_params(&self) -> Option<prefix::PrefixParams> {
        match *self {
            Self::LeastLoaded => None,
            Self::Prefix {
                blocks,
                ttl_s,
                balance,
                queue_gap,
            }
            | Self::Gr {
                blocks,
                ttl_s,
                balance,
                queue_gap,
                ..
            } => Some(prefix::PrefixParams {
                blocks,
                ttl: Duration::from_secs_f64(ttl_s),
                balance,
                queue_gap,
            }),
        }
    }

    /// The share of item accesses `gr` replicates (None for the other rules: no placement).
    pub fn hot_share(&self) -> Option<f64> {
        match *self {
            Self::Gr { hot_share, .. } => Some(hot_share),
            _ => None,
        }
    }

    /// The share of item accesses whose items every replica's item pool holds, where the
    /// rule sets it: `gr`'s `pool_hot_share`, 1 (replicate by hotness) under the other rules;
    /// None: the pools decide (`itempool::replicas::Pools::hot_share`).
    pub fn pool_hot_share(&self) -> Option<f64> {
        match *self {
            Self::Gr { pool_hot_share, .. } => pool_hot_share,
            _ => Some(1.0),
        }
    }

    /// Parses `NAME[:key=value]...`, checking every parameter.
    pub fn from_spec(spec: &str) -> Result<Self, BadRouting> {
        let bad = |why: String| BadRouting {
            spec: spec.to_string(),
            why,
        };
        let mut parts = spec.split(':');
        let mut obj = serde_json::Map::new();
        obj.insert(
            "routing".into(),
            parts.next().unwrap_or_default().trim().into(),
        );
        for kv in parts {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("{kv:?} is not key=value")))?;
            let v = serde_json::from_str(v.trim()).unwrap_or_else(|_| v.trim().into());
            obj.insert(k.trim().to_string(), v);
        }
        let routing: Self = serde_json::from_value(obj.into()).map_err(|e| bad(e.to_string()))?;
        routing.check().map_err(bad)?;
        Ok(routing)
    }

    /// Refuses values no rule can run with.
    pub fn check(&self) -> Result<(), String> {
        if let Some(h) = self.hot_share()
            && !(h.is_finite() && (0.0..=1.0).contains(&h))
        {
            return Err("hot_share must be between 0 and 1 (0: every item sharded)".into());
        }
        if let Some(p) = self.pool_hot_share()
            && !(p.is_finite() && (0.0..=1.0).contains(&p))
        {
            return Err("pool_hot_share must be between 0 and 1 (1: every pool by hotness)".into());
        }
        if let Self::Prefix {
            blocks,
            ttl_s,
            balance,
            ..
        }
        | Self::Gr {
            blocks,
            ttl_s,
            balance,
            ..
        } = *self
        {
            if blocks == 0 {
                return Err("blocks must be at least 1".into());
            }
            if !(ttl_s.is_finite() && ttl_s > 0.0) {
                return Err("ttl_s must be a positive number of seconds".into());
            }
            if !(balance.is_finite() && balance >= 0.0) {
                return Err("balance must be 0 or more (0.3: up to 1.3x the mean share)".into());
            }
        }
        Ok(())
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::LeastLoaded => "least-loaded",
            Self::Prefix { .. } => "prefix",
            Self::Gr { .. } => "gr",
        }
    }
}

/// The one factory.
pub fn build(routing: Routing) -> Box<dyn ReplicaChoice> {
    match (routing, routing.prefix_params()) {
        (Routing::Prefix { .. }, Some(p)) => Box::new(prefix::Prefix::new(p)),
        (Routing::Gr { .. }, Some(p)) => Box::new(gr::Gr::new(p)),
        _ => Box::new(least_loaded::LeastLoaded::default()),
    }
}

/// The rule in use and its name, swapped as one.
#[derive(Debug)]
pub struct RouteSlot {
    pub routing: Routing,
    pub rule: Box<dyn ReplicaChoice>,
}

impl RouteSlot {
    pub fn new(routing: Routing) -> Self {
        Self {
            routing,
            rule: build(routing),
        }
    }
}

#[cfg(test)]
mod tests;
