//! `recache bench peers`: recache side by side with the gateways GR teams run today
//! (sglang-router and vllm-router, pinned, from PyPI: [`install`]), each started as its own
//! process in front of the same replicas ([`system`], [`replicas`]) and sent the same
//! requests, systems interleaved within each of `--repeat` rounds (the order rotates, so no
//! system always runs first or last). Workloads: [`overhead`] (a static upstream), [`trace`]
//! (a Mooncake conversation trace as text, [`text`]), [`gr`] (GR ranking at equal memory, on
//! replica sets of its own), [`retrieve`] (generative retrieval against vLLM's beam search,
//! per beam width) and [`faults`]. Output: [`report`].

pub mod args;
pub mod faults;
pub mod gr;
pub mod install;
pub mod overhead;
pub mod replicas;
pub mod report;
pub mod retrieve;
pub mod system;
pub mod text;
pub mod trace;

use serde_json::Value;

use crate::error::BenchError;
use crate::http;
pub use args::PeersArgs;
use args::{Peer, Workload};
use recache_adapters::Engine;
use system::System;

/// The systems of one round, rotated by `round` so each takes every place in turn.
fn order(systems: &[System], round: u32) -> Vec<System> {
    let mut v = systems.to_vec();
    if !v.is_empty() {
        let k = round as usize % v.len();
        v.rotate_left(k);
    }
    v
}

fn emit(args: &PeersArgs, row: &Value) {
    if args.json {
        println!("{row}");
    } else {
        eprintln!("{row}");
    }
}

pub async fn run(args: PeersArgs) -> Result<(), BenchError> {
    if args.rate <= 0.0 {
        return Err(BenchError::Setup("--rate must be above 0".into()));
    }
    if args.workloads.contains(&Workload::Retrieve) {
        retrieve::check(&args)?;
    }
    if args.engine == Engine::Sglang && args.workloads.iter().any(|w| *w != Workload::Gr) {
        return Err(BenchError::Setup(
            "--engine sglang runs the gr workload only (--workloads gr)".into(),
        ));
    }
    let venv = args
        .peers_venv
        .clone()
        .unwrap_or_else(install::default_venv);
    install::ensure(&venv)?;
    let mut systems = vec![System::Recache];
    for p in &args.peers {
        if args.engine == Engine::Sglang && *p == Peer::VllmRouter {
            eprintln!("[peers] vllm-router left out: it fronts vLLM replicas only");
            continue;
        }
        if !systems.contains(&System::Peer(*p)) {
            systems.push(System::Peer(*p));
        }
    }
    // Engines only when a workload needs them.
    let needs_engines = (args.workloads.iter())
        .any(|w| matches!(w, Workload::Trace | Workload::Faults | Workload::Retrieve));
    let client = http::client();
    let replicas = match needs_engines {
        true => Some(replicas::Replicas::start(&args, &client).await?),
        false => None,
    };
    let mut all = Vec::new();
    for &w in &args.workloads {
        if w == Workload::Gr {
            // Its own replica sets, streams and per-stream summaries.
            let (order, emit) = (|r| order(&systems, r), |row: &Value| emit(&args, row));
            all.extend(gr::run(&args, &venv, &systems, &order, &emit).await?);
            continue;
        }
        let mut rows = Vec::new();
        let load = match (w, &replicas) {
            (Workload::Trace, Some(r)) => Some(trace::build(&args, &client, r).await?),
            _ => None,
        };
        let retrieval = match (w, &replicas) {
            (Workload::Retrieve, Some(r)) => Some(retrieve::load::build(&args, &client, r).await?),
            _ => None,
        };
        for round in 1..=args.repeat {
            let order = order(&systems, round - 1);
            let got = match (w, &replicas) {
                (Workload::Overhead, _) => overhead::round(&args, &venv, &order, round).await?,
                (Workload::Trace, Some(r)) => {
                    let mut v = Vec::new();
                    for &s in &order {
                        let load = load
                            .as_ref()
                            .ok_or_else(|| BenchError::Setup("no trace".into()))?;
                        v.push(trace::one(&args, &venv, r, load, s, round).await?);
                    }
                    v
                }
                (Workload::Retrieve, Some(r)) => {
                    let load = (retrieval.as_ref())
                        .ok_or_else(|| BenchError::Setup("no retrieval load".into()))?;
                    // recache's own loop beside its in-engine search; on one replica vLLM's
                    // beam search also runs without a gateway.
                    let mut with_direct = systems.clone();
                    with_direct.insert(1, System::RecacheLoop);
                    if r.urls.len() == 1 {
                        with_direct.push(System::Direct);
                    }
                    let order = self::order(&with_direct, round - 1);
                    let mut v = Vec::new();
                    for &width in &args.widths {
                        for &s in &order {
                            v.push(retrieve::one(&args, &venv, r, load, s, width, round).await?);
                        }
                    }
                    v
                }
                (Workload::Faults, Some(r)) => {
                    let mut v = Vec::new();
                    for &s in &order {
                        v.push(faults::one(&args, &venv, r, s, round).await?);
                    }
                    v
                }
                _ => Vec::new(),
            };
            for row in &got {
                emit(&args, row);
            }
            rows.extend(got);
        }
        let mut sums = report::summaries(w.name(), &rows);
        let goals = match w {
            Workload::Retrieve => retrieve::verdict(&sums),
            _ => report::verdict(w.name(), &sums),
        };
        if w == Workload::Retrieve {
            retrieve::vs_direct(&rows, &mut sums);
            retrieve::table(&sums);
        }
        sums.extend(goals);
        for s in &sums {
            emit(&args, s);
        }
        if let Some(out) = &args.out {
            let path = report::plot(out, w.name(), &sums)?;
            eprintln!("[peers] wrote {}", path.display());
        }
        all.extend(sums);
    }
    report::table(&all);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use args::Peer;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: PeersArgs,
    }

    /// The flags scripts outside the repository call (the contract) keep parsing.
    #[test]
    fn the_contract_flags_parse() {
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "peers",
            "--replicas",
            "2",
            "--data",
            "d.txt",
            "--items",
            "i.json",
            "--trace",
            "t.jsonl",
            "--workloads",
            "overhead,trace,gr,retrieve,faults",
            "--peers",
            "sglang-router,vllm-router",
            "--requests",
            "5",
            "--repeat",
            "2",
            "--json",
        ])
        .expect("the contract's command line parses");
        assert_eq!(cli.args.workloads.len(), 5);
        assert_eq!(cli.args.peers, [Peer::SglangRouter, Peer::VllmRouter]);
        assert!(cli.args.json);
    }

    #[test]
    fn rounds_rotate_the_order() {
        let s = [
            System::Recache,
            System::Peer(Peer::SglangRouter),
            System::Peer(Peer::VllmRouter),
        ];
        assert_eq!(order(&s, 0)[0], System::Recache);
        assert_eq!(order(&s, 1)[0], System::Peer(Peer::SglangRouter));
        assert_eq!(order(&s, 3), order(&s, 0));
    }

    #[test]
    fn summaries_take_medians_and_goals_compare_with_the_best_peer() {
        let row = |s: &str, rps: f64, added: f64| {
            serde_json::json!({"system": s, "workload": "overhead", "rps": rps,
                "added_p50_us": added, "errors": 0})
        };
        let rows = vec![
            row("recache", 100.0, 30.0),
            row("sglang-router", 40.0, 150.0),
            row("vllm-router", 20.0, 250.0),
            row("recache", 120.0, 40.0),
            row("sglang-router", 45.0, 170.0),
            row("vllm-router", 25.0, 260.0),
        ];
        let sums = report::summaries("overhead", &rows);
        assert_eq!(sums.len(), 3);
        assert_eq!(sums[0]["rps"], 110.0);
        assert_eq!(sums[0]["rps_range"], serde_json::json!([100.0, 120.0]));
        assert_eq!(sums[0]["summary"], true);
        let v = report::verdict("overhead", &sums).expect("goals");
        let goals = v["goals"].as_array().expect("goals");
        // 35 µs <= 0.3 x 160 µs (sglang-router, the best peer); 110 >= 2 x 42.5.
        assert_eq!(goals[0]["best_peer"], "sglang-router");
        assert_eq!(goals[0]["met"], true);
        assert_eq!(goals[1]["met"], true);
        assert_eq!(v["all_met"], true);
    }
}
