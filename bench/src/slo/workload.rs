//! The GR ranking requests, built exactly as `recache bench gr` builds them (its
//! [`workload`](crate::gr::workload) planner and [`bodies`](crate::gr::bodies)
//! renderer over `--data` and `--items`): every item title is tokenized on the engine once,
//! and a run's bodies are rendered on demand with the run's `mode` and `cache_salt`. The
//! planner is prefix-stable (the first n requests of a longer plan are the n-request plan), so
//! every run sends the same request i.

use bytes::Bytes;
use serde_json::json;

use super::args::SloArgs;
use crate::error::BenchError;
use crate::gr::bodies::Titles;
use crate::gr::workload::{self, Data, Shape};
use crate::http;
use crate::http::HttpClient;
use crate::rng::Rng;

pub struct Workload {
    data: Data,
    titles: Titles,
    shape: Shape,
    pub model: String,
    seed: u64,
    item_tokens: usize,
    /// Per bench invocation, so a rerun against the same engine starts cold.
    nonce: u64,
}

impl Workload {
    /// Loads the files, asks the engine for its model and tokenizes every item title.
    pub async fn build(http: &HttpClient, args: &SloArgs) -> Result<Self, BenchError> {
        let upstream = args.upstream();
        let data = workload::load(&args.data, &args.items)?;
        let served = http::first_model(http, &upstream).await.map_err(|e| {
            BenchError::Setup(format!(
                "--upstream {upstream} is not reachable or serves no model: {e}"
            ))
        })?;
        let model = args.model.clone().unwrap_or(served);
        let instruction = http::tokenize(
            http,
            &upstream,
            &model,
            recache::harness::DEFAULT_INSTRUCTION,
        )
        .await?;
        let shape = Shape {
            requests: 0,
            users: args.users,
            candidates: args.candidates,
            item_tokens: args.item_tokens,
            min_profile_tokens: args.min_profile_tokens,
            max_prompt_tokens: args.max_prompt_tokens,
            instruction_tokens: instruction.len(),
            rate: 1.0, // arrival times come from the bench's own generator
        };
        // Fails early on a shape the data cannot give.
        workload::plan(
            &data,
            &Shape {
                requests: 1,
                ..shape.clone()
            },
            args.seed,
        )?;
        let items: Vec<u64> = data.items.clone();
        let titles = Titles::tokenize(http, &upstream, &model, &data, items.into_iter()).await?;
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        Ok(Self {
            data,
            titles,
            shape,
            model,
            seed: args.seed,
            item_tokens: args.item_tokens,
            nonce: Rng::new(nonce).next_u64(),
        })
    }

    /// The first `n` requests as `/v1/rank` bodies with `mode` and the cache salt of `tag`
    /// (one salt per run: requests of a run share prefixes, runs never do).
    pub fn bodies(&self, n: usize, rank_mode: &str, tag: &str) -> Result<Vec<Bytes>, BenchError> {
        let shape = Shape {
            requests: n,
            ..self.shape.clone()
        };
        let plan = workload::plan(&self.data, &shape, self.seed)?;
        let salt = format!("slo-bench-{:016x}-{tag}", self.nonce);
        Ok(plan
            .iter()
            .map(|p| {
                let mut body = (*self
                    .titles
                    .body(p, &self.data, self.item_tokens, &self.model))
                .clone();
                body["mode"] = json!(rank_mode);
                body["cache_salt"] = json!(salt);
                Bytes::from(body.to_string())
            })
            .collect())
    }
}
