//! Writes a generated trace (see `recache_bench::tracegen`) that `recache sim` reads:
//!
//! ```sh
//! cargo run --release -p recache-bench --example gen_trace -- conv --out conv.jsonl
//! cargo run --release -p recache-bench --example gen_trace -- adversarial --out adv.jsonl
//! cargo run --release -p recache-bench --example gen_trace -- gr \
//!     --interactions ../shared/data/amazon/Beauty.txt --out beauty-gr.jsonl
//! ```
//!
//! Prints a one-line JSON summary (requests, refs, distinct blocks) to stdout.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use recache_bench::tracegen::{self, adversarial, conv, gr};

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
