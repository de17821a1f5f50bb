//! The `gr` workload's two streams, built once and sent alike to every system: BAT §6.1's
//! (`gr_load::build` over every user of `--data`) and the returning-user one (`--gr-users`
//! users), each `--requests` ranking requests at the same planned arrivals (Poisson at
//! `--rate`), candidates shuffled once per request ([`super::prompt`]).
//!
//! recache gets the `/v1/rank` bodies. The peers get what a team sends a gateway today: the
//! same request's user-first prompt (recache's UP layout, labels `256 + k`) as **text**, made
//! by detokenizing those token ids on the engine (`/detokenize`), not by rendering titles:
//! sglang-router refuses token-id prompts (422) and vllm-router routes them by length only,
//! and the detokenized text re-tokenizes to within a few tokens of the ids (every id came from
//! tokenizing titles on the same tokenizer; only merges across segment boundaries differ), so
//! both kinds of system are asked to rank the same candidates for the same profile with
//! nearly the same prompt length (each row's `mean_prompt_tokens`, from the engines'
//! answers, shows how near). The peers' body is recache's own scoring request
//! (`Engine::score_body`: the labels' log-probabilities), non-streamed.
//!
//! Each stream also carries recache's share of memory and item catalog ([`super::memory`]):
//! the items BAT's split of one replica's budget pools from the stream's past period (or its
//! `--pool-items` hottest), as the JSON lines `recache serve --rank-item-catalog` reads, in a
//! temporary file removed with the stream, and the replica layouts that follow from them.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use super::memory::{self, Sets};
use super::prompt;
use crate::error::BenchError;
use crate::http::{self, HttpClient};
use crate::peers::args::PeersArgs;
use crate::rng::Rng;
use crate::route::gr_load::{self, Past, PastItem};

/// One stream, ready to send.
pub struct Stream {
    /// The rows' `workload` (`gr`, `gr-returning`) and `stream` (`bat`, `returning`).
    pub workload: &'static str,
    pub stream: &'static str,
    pub rank_bodies: Vec<Arc<Value>>,
    pub peer_bodies: Vec<Arc<Value>>,
    /// Per request: the labels (candidates in request order), the held-out item's id and
    /// its place among the candidates.
    pub labels: Vec<Vec<u32>>,
    pub targets: Vec<Value>,
    pub target_pos: Vec<usize>,
    pub arrivals_s: Vec<f64>,
    /// Mean tokens of the user-first token prompts the peers' texts were made from.
    pub user_first_tokens: f64,
    pub distinct_users: usize,
    pub returning_share: f64,
    /// recache's `--rank-item-catalog` file and how many items it lists: the pool's items,
    /// `--rank-item-pool` per replica.
    pub catalog: PathBuf,
    pub catalog_items: usize,
    /// recache's item pool slots per replica (`--rank-item-pool`): the catalog's items, or
    /// `--pool-items`.
    pub pool_items: usize,
    /// Each replica's layout in recache's set and the peers' for this stream.
    pub sets: Sets,
    /// How recache's share was decided (the rows' `memory_split`).
    pub split: Value,
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.catalog);
    }
}

/// Which past-period items recache pools: `--pool-items`' hottest, else BAT's split of one
/// replica's budget (`--gr-kv-blocks`) after the working set.
fn past_choice(args: &PeersArgs, token_bytes: u64, pool_token_bytes: u64) -> Past {
    match args.pool_items {
        Some(n) => Past::Hottest(n),
        None => Past::Split(gr_load::Budget {
            kv_bytes: Sets::budget_bytes(args.gr_kv_blocks, token_bytes),
            token_bytes,
            pool_token_bytes,
            working_tokens: memory::working_tokens(args.max_model_len),
            after_user: args.pool_after_user,
        }),
    }
}

/// The rows' `memory_split`: which rule sized recache's pool and what it weighed.
fn split_json(args: &PeersArgs, load: &gr_load::GrLoad) -> Value {
    match &load.split {
        Some(s) => json!({"rule": "bat", "pool_items": s.pool.len(),
            "pool_codec": args.pool_codec.name(),
            "working_tokens": memory::working_tokens(args.max_model_len),
            "user_tokens": s.user_tokens, "kept_users": s.users.len(),
            "threshold": s.threshold}),
        None => json!({"rule": "--pool-items", "pool_items": load.past.len(),
            "pool_codec": args.pool_codec.name()}),
    }
}

/// Refuses a run whose `--data` / `--items` are missing before any engine starts.
pub fn check(args: &PeersArgs) -> Result<(), BenchError> {
    let (Some(data), Some(items)) = (&args.data, &args.items) else {
        return Err(BenchError::Setup(
            "--workloads gr needs --data FILE (user histories) and --items FILE (titles)".into(),
        ));
    };
    for p in [data, items] {
        if !p.is_file() {
            return Err(BenchError::Setup(format!("{}: no such file", p.display())));
        }
    }
    Ok(())
}

/// Builds the BAT stream and the returning-user stream on the engine at `upstream`, whose
/// model keeps `token_bytes` of KV a token (`pool_token_bytes` in recache's item pools).
pub async fn build(
    args: &PeersArgs,
    client: &HttpClient,
    upstream: &str,
    model: &str,
    token_bytes: u64,
    pool_token_bytes: u64,
) -> Result<Vec<Stream>, BenchError> {
    let (Some(data), Some(items)) = (&args.data, &args.items) else {
        return Err(BenchError::Setup(
            "--workloads gr needs --data FILE (user histories) and --items FILE (titles)".into(),
        ));
    };
    if let Some(bad) =
        (args.gr_streams.iter()).find(|s| !["bat", "returning"].contains(&s.as_str()))
    {
        return Err(BenchError::Setup(format!(
            "--gr-streams: unknown stream {bad:?} (bat, returning)"
        )));
    }
    let mut out = Vec::new();
    for (workload, stream, users) in [
        ("gr", "bat", None),
        (
            "gr-returning",
            "returning",
            Some(usize::from(args.gr_users)),
        ),
    ] {
        if !args.gr_streams.iter().any(|s| s == stream) {
            continue;
        }
        let load = gr_load::build(
            client,
            upstream,
            model,
            data,
            items,
            args.requests,
            users,
            args.max_model_len,
            1,
            past_choice(args, token_bytes, pool_token_bytes),
        )
        .await?;
        let pool_items = args.pool_items.unwrap_or(load.past.len());
        let sets = Sets::split(
            args.gr_kv_blocks,
            pool_items,
            args.max_model_len,
            token_bytes,
            pool_token_bytes,
        )?;
        let progress = crate::progress::Progress::new(
            load.bodies.len() as u64,
            format!("gr {stream}: peers' text prompts"),
        );
        let mut s = Stream {
            workload,
            stream,
            rank_bodies: Vec::new(),
            peer_bodies: Vec::new(),
            labels: Vec::new(),
            targets: Vec::new(),
            target_pos: Vec::new(),
            arrivals_s: arrivals(load.bodies.len(), args.rate, 7),
            user_first_tokens: 0.0,
            distinct_users: load.distinct_users,
            returning_share: load.returning_share,
            catalog: write_catalog(stream, &load.past)?,
            catalog_items: load.past.len(),
            pool_items,
            sets,
            split: split_json(args, &load),
        };
        for (i, body) in load.bodies.iter().enumerate() {
            let mut body = (**body).clone();
            let target = prompt::shuffle_candidates(&mut body, i as u64)
                .ok_or_else(|| BenchError::Setup(format!("gr request {i}: no candidates")))?;
            let pos = (body["items"].as_array().into_iter().flatten())
                .position(|it| it["id"] == target)
                .unwrap_or(0);
            let label_base = recache::harness::DEFAULT_LABEL_BASE;
            let (tokens, labels) = prompt::user_first(&body, &load.instruction, label_base);
            let text = detokenize(client, upstream, model, &tokens).await?;
            s.user_first_tokens += tokens.len() as f64;
            s.peer_bodies.push(Arc::new(prompt::peer_body(
                args.engine,
                model,
                &text,
                &labels,
            )));
            s.rank_bodies.push(Arc::new(body));
            s.labels.push(labels);
            s.targets.push(target);
            s.target_pos.push(pos);
            progress.inc(1);
        }
        progress.finish();
        s.user_first_tokens /= s.rank_bodies.len().max(1) as f64;
        eprintln!(
            "[peers] gr {stream}: {} requests, {} distinct users (returning share {:.2}), \
             {:.0} user-first tokens on average; recache's replicas {} blocks + {} pool bytes \
             ({} pool slots, {}), the peers' {} blocks + {} (equal memory: {} bytes each)",
            s.rank_bodies.len(),
            s.distinct_users,
            s.returning_share,
            s.user_first_tokens,
            s.sets.recache.kv_blocks,
            s.sets.recache.pool_bytes,
            s.pool_items,
            s.split,
            s.sets.peers.kv_blocks,
            s.sets.peers.pool_bytes,
            s.sets.replica_bytes(s.sets.peers)
        );
        out.push(s);
    }
    Ok(out)
}

/// Planned arrivals of `n` requests, Poisson at `rate` requests/s from 0 (seeded).
pub fn arrivals(n: usize, rate: f64, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    let mut at = 0.0;
    (0..n)
        .map(|i| {
            if i > 0 {
                at += rng.exponential(rate);
            }
            at
        })
        .collect()
}

/// The catalog as `--rank-item-catalog` reads it: one JSON line per item, hottest first.
pub fn catalog_lines(past: &[PastItem]) -> String {
    let mut s = String::new();
    for it in past {
        let id = it
            .id
            .parse::<u64>()
            .map_or_else(|_| json!(it.id), |n| json!(n));
        let line = json!({"id": id, "tokens": *it.tokens, "count": it.count});
        s.push_str(&line.to_string());
        s.push('\n');
    }
    s
}

fn write_catalog(stream: &str, past: &[PastItem]) -> Result<PathBuf, BenchError> {
    let path = std::env::temp_dir().join(format!(
        "recache-peers-gr-{}-{stream}.jsonl",
        std::process::id()
    ));
    std::fs::write(&path, catalog_lines(past))
        .map_err(BenchError::io(format!("writing {}", path.display())))?;
    Ok(path)
}

async fn detokenize(
    client: &HttpClient,
    upstream: &str,
    model: &str,
    tokens: &[u32],
) -> Result<String, BenchError> {
    let body = json!({"model": model, "tokens": tokens});
    let (status, v) = http::post(client, &format!("{upstream}/detokenize"), &body).await?;
    // vLLM answers `prompt`, SGLang `text`.
    match v["prompt"].as_str().or(v["text"].as_str()) {
        Some(text) if status == 200 => Ok(text.to_string()),
        _ => Err(BenchError::Setup(format!(
            "{upstream}/detokenize answered {status}: {}",
            prompt::short(&v)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_start_at_zero_and_average_the_rate() {
        let a = arrivals(2001, 4.0, 7);
        assert_eq!(a[0], 0.0);
        assert!(a.windows(2).all(|w| w[1] >= w[0]));
        let rate = 2000.0 / a[2000];
        assert!((rate - 4.0).abs() < 0.4, "{rate}");
        assert_eq!(a, arrivals(2001, 4.0, 7), "the same for every system");
    }

    #[test]
    fn catalog_lines_are_what_the_server_reads() {
        let past = [PastItem {
            id: "17".into(),
            tokens: Arc::new(vec![5, 6]),
            count: 3,
        }];
        let text = catalog_lines(&past);
        let v: Value = serde_json::from_str(text.trim()).expect("json");
        assert_eq!(v, json!({"id": 17, "tokens": [5, 6], "count": 3}));
    }
}
