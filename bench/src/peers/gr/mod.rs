//! The `gr` workload of `bench peers`: GR ranking on `--replicas` vLLM testbed replicas at
//! equal memory ([`memory`]), recache (`/v1/rank` with its GR defaults and the item pool,
//! [`pool`]) against each peer (user-first text prompts scored as recache scores them,
//! routed by the peer's `cache_aware`, [`prompt`]), on two streams built once ([`load`]):
//! BAT §6.1's (rows `"workload": "gr"`) and the returning users' (`"gr-returning"`), each
//! row also naming its `"stream"`. Two replica sets: the peers' (all blocks in the engine
//! cache, a one-block pool), started first and kept for the whole workload (the streams are
//! tokenized on it), and recache's (engine cache less the pool's blocks, the pool the items
//! BAT's split of the stream's past period gives it, or `--pool-items`), started per stream
//! when its split differs; every system's run starts from emptied caches ([`one`]). Summaries and goals per stream (rps ≥ 2× the best peer, Recall@10
//! no lower), with why recache fell short where it did ([`why`]); each summary also carries
//! its rps over the best peer's paired round by round (`rps_ratio_vs_best_peer`).

pub mod load;
pub mod memory;
pub mod one;
pub mod pool;
pub mod prompt;
pub mod why;

use serde_json::Value;

use crate::error::BenchError;
use crate::http;
use crate::peers::args::PeersArgs;
use crate::peers::replicas::Replicas;
use crate::peers::report;
use crate::peers::system::System;
use crate::stats::Spread;
use crate::testbed::PoolCodec;
use memory::Sets;

/// Row numbers the gr summaries carry beside report's own (medians, `*_range`).
const EXTRA: &[&str] = &[
    "recall_at_10",
    "ndcg_at_10",
    "service_p50_ms",
    "mean_prompt_tokens",
    "pool_hit_tokens",
    "user_first_share",
];

/// Runs every round of both streams, `order(round)` giving the systems of a round (0-based)
/// in turn, each row printed by `emit` as it is measured; returns the summary and goals rows.
pub async fn run(
    args: &PeersArgs,
    venv: &std::path::Path,
    systems: &[System],
    order: &dyn Fn(u32) -> Vec<System>,
    emit: &dyn Fn(&Value),
) -> Result<Vec<Value>, BenchError> {
    if !args.upstream.is_empty() {
        return Err(BenchError::Setup(
            "--workloads gr starts its own two replica sets (equal memory, the item pool's \
             connector on both); it does not run on --upstream replicas"
                .into(),
        ));
    }
    load::check(args)?;
    let model = args.model()?;
    let client = http::client();
    // The peers' layout never depends on the stream, so their set comes first and serves
    // tokenization; recache's share of memory is decided per stream from its past period.
    let plain = Sets::split(
        args.gr_kv_blocks,
        0,
        args.max_model_len,
        model.kv_token_bytes,
        model.kv_token_bytes,
    )?;
    // The peers' one-block pool is never read: it keeps the engines' rows as they are.
    let theirs = Replicas::start_layout(
        args,
        &client,
        "peers-gr-peers",
        plain.peers,
        PoolCodec::Bf16,
    )
    .await?;
    let streams = load::build(
        args,
        &client,
        &theirs.urls[0],
        &theirs.model,
        model.kv_token_bytes,
        model.pool_token_bytes(args.pool_codec),
    )
    .await?;
    let theirs = match systems.iter().any(|s| *s != System::Recache) {
        true => Some(theirs),
        false => None,
    };
    let mut ours: Option<(crate::testbed::Layout, Replicas)> = None;
    let mut out = Vec::new();
    for stream in &streams {
        // recache's replicas in this stream's layout (started again when it changes).
        let layout = stream.sets.recache;
        if ours.as_ref().is_none_or(|(l, _)| *l != layout) {
            drop(ours.take());
            let name = format!("peers-gr-recache-{}", stream.stream);
            ours = Some((
                layout,
                Replicas::start_layout(args, &client, &name, layout, args.pool_codec).await?,
            ));
        }
        let Some((_, ours)) = &ours else {
            return Err(BenchError::Setup("recache's replicas did not start".into()));
        };
        let mut rows = Vec::new();
        for round in 1..=args.repeat {
            for s in order(round - 1) {
                let set = match (s, &theirs) {
                    (System::Peer(_), Some(t)) => t,
                    _ => ours,
                };
                let row = one::one(args, venv, set, stream, s, round).await?;
                emit(&row);
                rows.push(row);
            }
        }
        let mut sums = summaries(stream.workload, stream.stream, &rows);
        if let Some(mut v) = report::verdict(stream.workload, &sums) {
            why::explain(&mut v, &sums);
            sums.push(v);
        }
        for s in &sums {
            emit(s);
        }
        if let Some(path) = &args.out {
            let png = report::plot(path, stream.workload, &sums)?;
            eprintln!("[peers] wrote {}", png.display());
        }
        out.extend(sums);
    }
    Ok(out)
}

/// report's summaries of `workload`, each with the stream's name and [`EXTRA`]'s medians.
pub fn summaries(workload: &str, stream: &str, rows: &[Value]) -> Vec<Value> {
    let mut sums = report::summaries(workload, rows);
    for s in &mut sums {
        let runs: Vec<&Value> = (rows.iter())
            .filter(|r| r["workload"] == workload && r["system"] == s["system"])
            .collect();
        let Some(o) = s.as_object_mut() else { continue };
        o.insert("stream".into(), stream.into());
        for f in EXTRA {
            let xs: Vec<f64> = runs.iter().filter_map(|r| r[*f].as_f64()).collect();
            if xs.is_empty() {
                o.insert((*f).into(), Value::Null);
                continue;
            }
            let sp = Spread::of(xs);
            o.insert((*f).into(), sp.median.into());
            o.insert(format!("{f}_range"), serde_json::json!([sp.min, sp.max]));
        }
        if let Some(note) = runs.first().map(|r| r["quality_note"].clone()) {
            o.insert("quality_note".into(), note);
        }
        let ratio = ratio_vs_best_peer(&runs, rows, workload);
        o.insert("rps_ratio_vs_best_peer".into(), serde_json::json!(ratio));
    }
    sums
}

/// A system's rps over the best peer's of the same round (the fastest peer that round),
/// median and range over the rounds both have ([`crate::stats::paired_ratio`]).
fn ratio_vs_best_peer(runs: &[&Value], rows: &[Value], workload: &str) -> Option<Spread> {
    let round_rps = |r: &Value| Some((r["round"].as_u64()?, r["rps"].as_f64()?));
    let mine: Vec<(u64, f64)> = runs.iter().filter_map(|r| round_rps(r)).collect();
    let mut best: Vec<(u64, f64)> = Vec::new();
    let peers = (rows.iter()).filter(|r| r["workload"] == workload && r["system"] != "recache");
    for (round, rps) in peers.filter_map(round_rps) {
        match best.iter_mut().find(|(r, _)| *r == round) {
            Some(b) => b.1 = b.1.max(rps),
            None => best.push((round, rps)),
        }
    }
    crate::stats::paired_ratio(&mine, &best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(s: &str, rps: f64, recall: f64) -> Value {
        json!({"system": s, "workload": "gr", "stream": "bat", "rps": rps, "hit_rate": 0.5,
               "model": "m", "round": 1,
               "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0, "max_share": 1.0, "errors": 0,
               "computed_tokens": 100.0, "kv_bytes": 10, "recall_at_10": recall,
               "ndcg_at_10": 0.05, "quality_note": "random"})
    }

    #[test]
    fn gr_summaries_carry_quality_and_the_goals_compare_it() {
        let rows = vec![
            row("recache", 3.0, 0.2),
            row("sglang-router", 1.0, 0.1),
            row("recache", 5.0, 0.2),
            row("sglang-router", 1.0, 0.3),
        ];
        let sums = summaries("gr", "bat", &rows);
        assert_eq!(sums.len(), 2);
        assert_eq!(sums[0]["rps"], 4.0);
        assert_eq!(sums[0]["recall_at_10"], 0.2);
        assert_eq!(sums[1]["recall_at_10_range"], json!([0.1, 0.3]));
        assert_eq!(sums[0]["stream"], "bat");
        assert_eq!(sums[0]["summary"], true);
        assert_eq!(sums[0]["quality_note"], "random");
        assert_eq!(sums[0]["model"], "m");
        let v = report::verdict("gr", &sums).expect("goals");
        let goals = v["goals"].as_array().expect("goals");
        assert_eq!(goals.len(), 2, "{v}");
        assert_eq!(
            (goals[0]["field"].clone(), goals[0]["met"].clone()),
            (json!("rps"), json!(true))
        );
        assert_eq!(goals[1]["field"], "recall_at_10");
        assert_eq!(goals[1]["met"], true, "0.2 >= 0.2");
        // The returning-user stream: the same fields, throughput at 1x (never less).
        let r = report::verdict("gr-returning", &sums).expect("goals");
        assert_eq!(r["goals"].as_array().map(Vec::len), Some(2));
        assert_eq!(r["goals"][0]["goal"], "rps >= 1x best peer", "{r}");
        // --out draws the stream's panels.
        let dir = std::env::temp_dir().join(format!("peers-gr-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let png = report::plot(&dir.join("p.png"), "gr-returning", &sums).expect("plot");
        assert!(
            png.ends_with("p-gr-returning.png") && png.is_file(),
            "{}",
            png.display()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ratios_to_the_best_peer_pair_rounds() {
        let at = |s: &str, round: u64, rps: f64| {
            let mut r = row(s, rps, 0.2);
            r["round"] = json!(round);
            r
        };
        // Round 1: best peer 2 (ratio 3); round 2: best peer 4 (ratio 2); round 3: recache
        // only (left out); round 4: best peer 1 (ratio 10).
        let rows = vec![
            at("recache", 1, 6.0),
            at("sglang-router", 1, 2.0),
            at("vllm-router", 1, 1.0),
            at("recache", 2, 8.0),
            at("sglang-router", 2, 3.0),
            at("vllm-router", 2, 4.0),
            at("recache", 3, 50.0),
            at("recache", 4, 10.0),
            at("vllm-router", 4, 1.0),
        ];
        let sums = summaries("gr", "bat", &rows);
        assert_eq!(
            sums[0]["rps_ratio_vs_best_peer"],
            json!({"median": 3.0, "min": 2.0, "max": 10.0})
        );
        assert_eq!(sums[0]["model"], "m");
        // Only recache ran: nothing to pair with.
        let alone = summaries("gr", "bat", &rows[..1]);
        assert_eq!(alone[0]["rps_ratio_vs_best_peer"], Value::Null);
    }
}
