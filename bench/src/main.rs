//! The `recache-bench` command: `recache bench ARGS` runs `recache-bench ARGS` (the `recache`
//! binary finds this one beside itself). Results are JSON on stdout, progress on stderr.

use anyhow::Context;
use clap::Parser;

use recache_bench::BenchCmd;
use recache_bench::items::ItemsCmd;

/// recache's benchmarks; each prints JSON. Run as `recache bench COMMAND` (or
/// `recache-bench COMMAND`).
#[derive(Parser, Debug)]
#[command(name = "recache bench", bin_name = "recache bench", version)]
struct Cli {
    #[command(subcommand)]
    command: BenchCmd,
}

/// `recache items ...`, handed over by the `recache` binary: parsed and helped as its own
/// subcommand.
#[derive(Parser, Debug)]
#[command(name = "recache", bin_name = "recache")]
struct ItemsCli {
    #[command(subcommand)]
    command: ItemsTop,
}

#[derive(clap::Subcommand, Debug)]
enum ItemsTop {
    /// Catalog tools: `recache items index` builds the retrieval index.
    #[command(subcommand)]
    Items(ItemsCmd),
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
    if std::env::args_os().nth(1).is_some_and(|a| a == "items") {
        let ItemsTop::Items(cmd) = ItemsCli::parse().command;
        return Ok(cmd.run()?);
    }
    let cli = Cli::parse();
    let runtime = tokio::runtime::Runtime::new().context("starting the tokio runtime")?;
    runtime.block_on(async {
        tokio::select! {
            done = cli.command.run() => Ok(done?),
            // Returning drops the benchmark's future and with it the children it started
            // (`recache serve`, testbeds), which a process dying on the signal would leave
            // running: `bench slo` killed by SIGTERM left its two serve children behind.
            signal = stop_signal() => Err(anyhow::anyhow!("recache bench: interrupted ({signal})")),
        }
    })
}

/// The first SIGINT or SIGTERM (`kill`, a CI timeout, a container stop).
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}
