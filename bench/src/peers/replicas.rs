//! The engine replicas every system of a run stands in front of: `--upstream` ones as given,
//! else `--replicas` vLLM testbed engines with `--kv-blocks` each (named `peers-rN`, or
//! `peers-lpM-rN` when the retrieve workload raises their `--max-logprobs` to M; stopped when
//! the run ends), warmed up once so no system's numbers carry a fresh engine's first slow
//! requests; and what the rows need of them: cache resets, counter scrapes and snapshots, the
//! workload's counts with recache's own calls taken out.

use super::args::PeersArgs;
use crate::engine_ops;
use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::own_traffic::{self, Own};
use crate::snapshot::{self, Snapshot};
use crate::testbed::{self, Layout, Testbed};
use recache_adapters::Engine;

pub struct Replicas {
    pub urls: Vec<String>,
    pub kv_events: Vec<String>,
    pub engine: Engine,
    pub model: String,
    /// KV bytes of every replica's cache together (the row's `kv_bytes`).
    pub kv_bytes: u64,
    _testbed: Option<Testbed>,
}

impl Replicas {
    pub async fn start(args: &PeersArgs, client: &HttpClient) -> Result<Self, BenchError> {
        let block_bytes = testbed::BLOCK_TOKENS * args.model()?.kv_token_bytes;
        let (urls, kv_events, testbed) = if args.upstream.is_empty() {
            let logprobs = super::retrieve::max_logprobs(args);
            // The retrieve workload's replicas also run recache's endpoint plugin (its routes
            // only: vLLM serves the other systems as without it).
            let plugin = args.workloads.contains(&super::args::Workload::Retrieve);
            let mut tb = Testbed::new(&args.testbed_dir, block_bytes)?
                .with_max_logprobs(logprobs)
                .with_retrieve_plugin(plugin)
                .with_model(args.testbed_model);
            // Other names for other options: `up` refuses a live name started otherwise.
            let mut prefix = match logprobs {
                Some(n) => format!("peers-lp{n}-"),
                None => "peers-".to_string(),
            };
            prefix.push_str(if plugin { "rp" } else { "r" });
            let layout = Layout {
                kv_blocks: args.kv_blocks,
                pool_bytes: 0,
            };
            let mut urls = Vec::new();
            let mut events = Vec::new();
            for i in 0..args.replicas {
                let inst = tb.start_named(&format!("{prefix}{i}"), layout)?;
                urls.push(inst.upstream);
                events.extend(inst.kv_events);
            }
            (urls, events, Some(tb))
        } else {
            if !args.kv_events.is_empty() && args.kv_events.len() != args.upstream.len() {
                return Err(BenchError::Setup(
                    "--kv-events: give one per --upstream, in the same order".into(),
                ));
            }
            (args.upstream.clone(), args.kv_events.clone(), None)
        };
        let engine = engine_ops::resolve(client, &urls[0], Some(Engine::Vllm)).await;
        let model = http::first_model(client, &urls[0]).await?;
        for up in &urls {
            engine_ops::warm_up(client, up, &model).await?;
        }
        Ok(Self {
            kv_bytes: urls.len() as u64 * args.kv_blocks * block_bytes,
            urls,
            kv_events,
            engine,
            model,
            _testbed: testbed,
        })
    }

    /// Empties every replica's prefix cache.
    pub async fn reset(&self, client: &HttpClient) -> Result<(), BenchError> {
        for up in &self.urls {
            engine_ops::reset_cache(client, self.engine, up, false)
                .await
                .map_err(|e| BenchError::Setup(format!("{up}: {e}")))?;
        }
        Ok(())
    }

    /// Every replica's `/metrics` text.
    pub async fn scrape(&self, client: &HttpClient) -> Result<Vec<String>, BenchError> {
        let mut out = Vec::new();
        for up in &self.urls {
            out.push(http::get_text(client, &format!("{up}/metrics")).await?);
        }
        Ok(out)
    }

    /// Requests each replica finished between two scrapes (None: the engine has no counter).
    pub fn requests(&self, before: &[String], after: &[String]) -> Option<Vec<f64>> {
        let name = self.engine.requests_counter()?;
        Some(
            before
                .iter()
                .zip(after)
                .map(|(b, a)| http::counter(a, name) - http::counter(b, name))
                .collect(),
        )
    }

    /// Prompt tokens looked up and found cached, over every replica, between two scrapes.
    pub fn cache(&self, before: &[String], after: &[String]) -> (f64, f64) {
        before
            .iter()
            .zip(after)
            .map(|(b, a)| engine_ops::cache_deltas(self.engine, b, a))
            .fold((0.0, 0.0), |(q, h), (dq, dh)| (q + dq, h + dh))
    }

    /// Every replica's counters and, with `recache` (its base URL), recache's own calls so
    /// far, read together ([`snapshot::take`]).
    pub async fn snapshot(
        &self,
        client: &HttpClient,
        recache: Option<&str>,
    ) -> Result<Snapshot, BenchError> {
        let mut engines = async || self.scrape(client).await;
        let mut ours = async || recache_metrics(client, recache).await;
        snapshot::take(&mut engines, &mut ours).await
    }

    /// After a run of `ok` answered requests (None: the engines' request count per answer
    /// is unknown): snapshots until the engines have counted them all besides recache's own
    /// calls and their counters stopped moving ([`snapshot::settled`]).
    pub async fn settled(
        &self,
        client: &HttpClient,
        recache: Option<&str>,
        before: &Snapshot,
        ok: Option<usize>,
    ) -> Result<Snapshot, BenchError> {
        let mut engines = async || self.scrape(client).await;
        let mut ours = async || recache_metrics(client, recache).await;
        let names = snapshot::engine_counters(self.engine);
        let done = |now: &Snapshot| {
            let counted = self.counted(before, now).requests_per_replica;
            match (ok, counted) {
                (Some(ok), Some(per)) if per.iter().sum::<f64>() < ok as f64 => Err(format!(
                    "{} of {ok} answered requests counted",
                    per.iter().sum::<f64>()
                )),
                _ => Ok(()),
            }
        };
        snapshot::settled("the run", &mut engines, &mut ours, &names, done).await
    }

    /// What the engines counted for the workload between two snapshots: recache's own calls
    /// taken out ([`own_traffic`]).
    pub fn counted(&self, before: &Snapshot, after: &Snapshot) -> Counted {
        let own = own_traffic::between(&before.recache, &after.recache, &self.urls);
        let (queries, hits) =
            own_traffic::less_cache(self.cache(&before.engines, &after.engines), &own);
        let per = self.requests(&before.engines, &after.engines);
        Counted {
            queries,
            hits,
            requests_per_replica: own_traffic::less_requests(per, &own),
            own,
        }
    }
}

/// The engines' counts of a run, the workload's alone.
#[derive(Debug, Clone)]
pub struct Counted {
    /// Prompt tokens looked up and found in the engines' own prefix caches.
    pub queries: f64,
    pub hits: f64,
    pub requests_per_replica: Option<Vec<f64>>,
    /// recache's own calls per replica, taken out of the above (the row's `own_traffic`).
    pub own: Vec<Own>,
}

/// recache's `/metrics` (one instance), or none for a peer.
async fn recache_metrics(
    client: &HttpClient,
    base: Option<&str>,
) -> Result<Vec<String>, BenchError> {
    match base {
        Some(b) => Ok(vec![http::get_text(client, &format!("{b}/metrics")).await?]),
        None => Ok(Vec::new()),
    }
}

/// The busiest replica's requests over the mean.
pub fn max_share(per_replica: &[f64]) -> f64 {
    let mean = per_replica.iter().sum::<f64>() / per_replica.len().max(1) as f64;
    per_replica.iter().copied().fold(0.0, f64::max) / mean.max(1e-9)
}

impl Replicas {
    /// `--replicas` testbed engines named `{name}-r{i}`, each with `layout` (the gr
    /// workload's replica sets: engine cache and item pool, kept as `codec` says);
    /// `kv_bytes` counts both.
    pub async fn start_layout(
        args: &PeersArgs,
        client: &HttpClient,
        name: &str,
        layout: Layout,
        codec: testbed::PoolCodec,
    ) -> Result<Self, BenchError> {
        let block_bytes = testbed::BLOCK_TOKENS * args.model()?.kv_token_bytes;
        let mut tb = Testbed::new(&args.testbed_dir, block_bytes)?
            .with_model(args.testbed_model)
            .with_engine(Some(args.engine))
            .with_pool_codec(codec);
        let (mut urls, mut kv_events) = (Vec::new(), Vec::new());
        for i in 0..args.replicas {
            let inst = tb.start_named(&format!("{name}-r{i}"), layout)?;
            urls.push(inst.upstream);
            kv_events.extend(inst.kv_events);
        }
        let engine = args.engine;
        let model = http::first_model(client, &urls[0]).await?;
        for up in &urls {
            engine_ops::warm_up(client, up, &model).await?;
        }
        Ok(Self {
            kv_bytes: urls.len() as u64 * (layout.kv_blocks * block_bytes + layout.pool_bytes),
            urls,
            kv_events,
            engine,
            model,
            _testbed: Some(tb),
        })
    }
}
