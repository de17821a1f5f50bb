//! Writes a generated trace (see `recache_bench::tracegen`) that `recache sim` reads:
//!
//! ```sh
//! cargo run --release -p recache-bench --example gen_trace -- conv --out conv.jsonl
//! cargo run --release -p recache-bench --example gen_trace -- adversarial --out adv.jsonl
//! cargo run --release -p recache-bench --example gen_trace -- gr \
//!     --interactions ../shared/data/amazon/Beauty.txt --out beauty-gr.jsonl
//! cargo run --release -p recache-bench --example gen_trace -- online-qa --out qa.jsonl
//! cargo run --release -p recache-bench --example gen_trace -- ml100k --out ml100k.jsonl
//!     # --inter FILE; default: the file examples/data/install-ml100k installed
//! ```
//!
//! Prints a one-line JSON summary (requests, refs, distinct blocks) to stdout.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use recache_bench::tracegen::{self, adversarial, conv, gr, ml100k, online_qa};

#[derive(Parser)]
#[command(
    name = "gen_trace",
    about = "Generate a KV-block trace for recache sim"
)]
struct Cli {
    #[command(subcommand)]
    kind: Kind,
    /// Output JSONL file.
    #[arg(long, global = true, default_value = "trace.jsonl")]
    out: PathBuf,
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
}

#[derive(Subcommand)]
enum Kind {
    /// Mooncake-style conversations with Poisson turns.
    Conv(conv::ConvShape),
    /// Conversations whose reuse flips between two classes every epoch.
    Adversarial(adversarial::AdversarialShape),
    /// GR ranking traffic with segments (user-first chains, pooled items).
    Gr {
        /// `user item item ...` interaction file (e.g. Amazon Beauty); synthetic without.
        #[arg(long)]
        interactions: Option<PathBuf>,
        #[command(flatten)]
        shape: gr::GrShape,
    },
    /// LCR §5.2's Online-QA shape: multi-turn conversations, log-normal gaps.
    OnlineQa(online_qa::OnlineQaShape),
    /// MovieLens-100k in time order: one user-first GR request per session.
    Ml100k {
        /// RecBole `.inter` file [default: the one examples/data/install-ml100k installed].
        #[arg(long)]
        inter: Option<PathBuf>,
        #[command(flatten)]
        shape: ml100k::Ml100kShape,
    },
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cli = Cli::parse();
    let requests = match &cli.kind {
        Kind::Conv(s) => conv::generate(s, cli.seed),
        Kind::Adversarial(s) => adversarial::generate(s, cli.seed),
        Kind::Gr {
            interactions,
            shape,
        } => {
            let pop = match interactions {
                Some(p) => gr::Population::from_file(p)?,
                None => {
                    let mut rng = tracegen::rng::Rng::new(cli.seed ^ 0x9090);
                    gr::Population::synthetic(shape.synth_users, shape.synth_items, &mut rng)
                }
            };
            gr::generate(shape, &pop, cli.seed)?
        }
        Kind::OnlineQa(s) => online_qa::generate(s, cli.seed),
        Kind::Ml100k { inter, shape } => {
            let path = inter.clone().or_else(ml100k::find_inter).ok_or(
                "no ml-100k.inter: run examples/data/install-ml100k (it prints the path) or \
                 pass --inter FILE",
            )?;
            ml100k::generate(shape, &ml100k::read_inter(&path)?)?
        }
    };
    tracegen::write(&cli.out, &requests)?;
    let refs: usize = requests.iter().map(|r| r.hash_ids.len()).sum();
    let mut distinct = std::collections::HashSet::new();
    for r in &requests {
        distinct.extend(r.hash_ids.iter().copied());
    }
    println!(
        "{}",
        serde_json::json!({"out": cli.out, "requests": requests.len(), "refs": refs,
            "distinct_blocks": distinct.len()})
    );
    Ok(())
}
