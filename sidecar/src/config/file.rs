//! The TOML file of `recache serve --config`: one flat key per flag (its name with
//! underscores), and the merge that fills what flags and environment left unset from it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use recache_adapters::Engine;
use serde::Deserialize;

use super::{ConfigError, ServeArgs};
use crate::itempool::config::PoolArgs;
use crate::kvloop::config::KvLoopArgs;
use crate::limits::LimitArgs;
use crate::rank::config::{Admission, ItemReuse, RankArgs, SelectorKind};
use crate::retrieve::config::RetrieveArgs;
use crate::slo::args::{SloArgs, Switch};

/// The same settings as read from a TOML file: one flat key per flag (but `--config`).
/// Durations are strings with units, as on the command line.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    listen: Option<SocketAddr>,
    upstream: Option<Vec<String>>,
    engine: Option<Engine>,
    max_body_bytes: Option<usize>,
    connect_timeout: Option<String>,
    upstream_timeout: Option<String>,
    health_interval: Option<String>,
    drain_timeout: Option<String>,
    worker_threads: Option<usize>,
    admin_token: Option<String>,
    admin_listen: Option<SocketAddr>,
    max_header_bytes: Option<usize>,
    header_read_timeout: Option<String>,
    max_in_flight_per_client: Option<usize>,
    slo: Option<Switch>,
    slo_rank_deadline: Option<String>,
    slo_completions_deadline: Option<String>,
    slo_chat_deadline: Option<String>,
    slo_dispatch_threshold: Option<f64>,
    slo_engine_priority: Option<bool>,
    eviction_policy: Option<String>,
    routing: Option<String>,
    route_canary: Option<String>,
    rank_selector: Option<SelectorKind>,
    rank_window: Option<usize>,
    rank_user_cache_tokens: Option<u64>,
    rank_label_base: Option<u32>,
    rank_max_items: Option<usize>,
    rank_item_reuse: Option<ItemReuse>,
    rank_admission: Option<Admission>,
    rank_item_pool: Option<usize>,
    rank_item_pool_fills: Option<usize>,
    rank_item_pool_refresh: Option<f64>,
    rank_item_catalog: Option<PathBuf>,
    rank_pool_store: Option<String>,
    rank_pool_costs: Option<String>,
    rank_trace_out: Option<PathBuf>,
    rank_pool_recompute: Option<String>,
    rank_pool_after_user: Option<bool>,
    rank_readout: Option<crate::rank::readout::Readout>,
    rank_quality_sample: Option<f64>,
    rank_quality_min: Option<f64>,
    retrieve_index: Option<PathBuf>,
    retrieve_max_beam_width: Option<usize>,
    retrieve_align: Option<usize>,
    retrieve_pad_token: Option<u32>,
    retrieve_in_engine: Option<String>,
    kv_events: Option<OneOrMany>,
    kv_replay: Option<String>,
    publish: Option<String>,
    kv_engine_blocks: Option<usize>,
    kv_block_size: Option<usize>,
    sglang_priority: Option<bool>,
    shadow_in_flight: Option<usize>,
}

/// A key that takes one value or a list (`kv_events = "tcp://a:1"` or `["tcp://a:1", ...]`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

impl ServeArgs {
    /// These arguments with what they leave unset taken from the file: the one place where
    /// flag-or-environment beats the file.
    pub(super) fn over(&self, file: FileConfig) -> Result<ServeArgs, ConfigError> {
        let d = |key: &'static str, text: Option<String>| {
            text.map(|t| {
                humantime::parse_duration(&t)
                    .map_err(|source| ConfigError::Duration { key, source })
            })
            .transpose()
        };
        let (rank, kv, rt) = (&self.rank, &self.kvloop, &self.retrieve);
        let (pool, lim, slo) = (&rank.pool, &self.limits, &self.slo);
        Ok(ServeArgs {
            listen: self.listen.or(file.listen),
            upstream: if self.upstream.is_empty() {
                file.upstream.unwrap_or_default()
            } else {
                self.upstream.clone()
            },
            config: self.config.clone(),
            engine: self.engine.or(file.engine),
            max_body_bytes: self.max_body_bytes.or(file.max_body_bytes),
            connect_timeout: self
                .connect_timeout
                .or(d("connect_timeout", file.connect_timeout)?),
            upstream_timeout: self
                .upstream_timeout
                .or(d("upstream_timeout", file.upstream_timeout)?),
            health_interval: self
                .health_interval
                .or(d("health_interval", file.health_interval)?),
            drain_timeout: self
                .drain_timeout
                .or(d("drain_timeout", file.drain_timeout)?),
            worker_threads: self.worker_threads.or(file.worker_threads),
            rank: RankArgs {
                rank_selector: rank.rank_selector.or(file.rank_selector),
                rank_window: rank.rank_window.or(file.rank_window),
                rank_user_cache_tokens: rank.rank_user_cache_tokens.or(file.rank_user_cache_tokens),
                rank_label_base: rank.rank_label_base.or(file.rank_label_base),
                rank_max_items: rank.rank_max_items.or(file.rank_max_items),
                rank_item_reuse: rank.rank_item_reuse.or(file.rank_item_reuse),
                rank_admission: rank.rank_admission.or(file.rank_admission),
                pool: PoolArgs {
                    rank_item_pool: pool.rank_item_pool.or(file.rank_item_pool),
                    rank_item_pool_fills: pool.rank_item_pool_fills.or(file.rank_item_pool_fills),
                    rank_item_pool_refresh: (pool.rank_item_pool_refresh)
                        .or(file.rank_item_pool_refresh),
                    rank_item_catalog: pool.rank_item_catalog.clone().or(file.rank_item_catalog),
                    rank_pool_store: pool.rank_pool_store.clone().or(file.rank_pool_store),
                    rank_pool_costs: pool.rank_pool_costs.clone().or(file.rank_pool_costs),
                },
                rank_trace_out: rank.rank_trace_out.clone().or(file.rank_trace_out),
                rank_pool_recompute: (rank.rank_pool_recompute.clone())
                    .or(file.rank_pool_recompute),
                rank_readout: rank.rank_readout.or(file.rank_readout),
                rank_pool_after_user: rank.rank_pool_after_user
                    || file.rank_pool_after_user.unwrap_or(false),
                rank_quality_sample: rank.rank_quality_sample.or(file.rank_quality_sample),
                rank_quality_min: rank.rank_quality_min.or(file.rank_quality_min),
            },
            retrieve: RetrieveArgs {
                retrieve_index: rt.retrieve_index.clone().or(file.retrieve_index),
                retrieve_max_beam_width: rt
                    .retrieve_max_beam_width
                    .or(file.retrieve_max_beam_width),
                retrieve_align: rt.retrieve_align.or(file.retrieve_align),
                retrieve_pad_token: rt.retrieve_pad_token.or(file.retrieve_pad_token),
                retrieve_in_engine: rt.retrieve_in_engine.clone().or(file.retrieve_in_engine),
            },
            kvloop: KvLoopArgs {
                kv_events: if kv.kv_events.is_empty() {
                    file.kv_events.map(OneOrMany::into_vec).unwrap_or_default()
                } else {
                    kv.kv_events.clone()
                },
                kv_replay: kv.kv_replay.clone().or(file.kv_replay),
                publish: kv.publish.clone().or(file.publish),
                kv_engine_blocks: kv.kv_engine_blocks.or(file.kv_engine_blocks),
                kv_block_size: kv.kv_block_size.or(file.kv_block_size),
                // A plain switch cannot say "off" on the command line, so the file's `true`
                // holds unless the flag or its variable turned it on anyway.
                sglang_priority: kv.sglang_priority || file.sglang_priority.unwrap_or(false),
                shadow_in_flight: kv.shadow_in_flight.or(file.shadow_in_flight),
            },
            limits: LimitArgs {
                max_header_bytes: lim.max_header_bytes.or(file.max_header_bytes),
                header_read_timeout: (lim.header_read_timeout)
                    .or(d("header_read_timeout", file.header_read_timeout)?),
                max_in_flight_per_client: (lim.max_in_flight_per_client)
                    .or(file.max_in_flight_per_client),
            },
            slo: SloArgs {
                slo: slo.slo.or(file.slo),
                slo_rank_deadline: (slo.slo_rank_deadline)
                    .or(d("slo_rank_deadline", file.slo_rank_deadline)?),
                slo_completions_deadline: (slo.slo_completions_deadline).or(d(
                    "slo_completions_deadline",
                    file.slo_completions_deadline,
                )?),
                slo_chat_deadline: (slo.slo_chat_deadline)
                    .or(d("slo_chat_deadline", file.slo_chat_deadline)?),
                slo_dispatch_threshold: slo.slo_dispatch_threshold.or(file.slo_dispatch_threshold),
                slo_engine_priority: slo.slo_engine_priority
                    || file.slo_engine_priority.unwrap_or(false),
            },
            admin_token: self.admin_token.clone().or(file.admin_token),
            admin_listen: self.admin_listen.or(file.admin_listen),
            eviction_policy: self.eviction_policy.clone().or(file.eviction_policy),
            routing: self.routing.clone().or(file.routing),
            route_canary: self.route_canary.or(d("route_canary", file.route_canary)?),
        })
    }
}

pub(super) fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigError::Parse {
        path: path.into(),
        source,
    })
}
