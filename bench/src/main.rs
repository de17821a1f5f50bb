//! The `recache-bench` command: `recache bench ARGS` runs `recache-bench ARGS` (the `recache`
//! binary finds this one beside itself). Results are JSON on stdout, progress on stderr.

use anyhow::Context;
use clap::Parser;

use recache_bench::BenchCmd;

/// recache's benchmarks; each prints JSON. Run as `recache bench COMMAND` (or
/// `recache-bench COMMAND`).
#[derive(Parser, Debug)]
#[command(name = "recache bench", bin_name = "recache bench", version)]
struct Cli {
    #[command(subcommand)]
    command: BenchCmd,
}

fn main() -> anyhow::Result<()> {
    // The in-process recache of a benchmark logs as `recache serve` does (RECACHE_LOG).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RECACHE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    Ok(runtime.block_on(cli.command.run())?)
}
