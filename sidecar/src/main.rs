//! The `recache` command: parses the command line and hands over to the library, or, for
//! `recache bench`, `recache items` (the offline retrieval-index builder) and `recache sim
//! --plot`, to the `recache-bench` binary beside this one (as git runs `git-foo`): the serving
//! binary links no benchmark, plotting or index-building code.

use std::ffi::OsString;

use anyhow::Context;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use tokio::net::TcpListener;

use recache::config::ServeArgs;

/// recache: a drop-in OpenAI-compatible proxy that makes generative-recommendation serving on
/// vLLM cheap.
#[derive(Parser, Debug)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the proxy in front of one or more engine replicas.
    ///
    /// Settings come from flags, then RECACHE_* environment variables, then the TOML file
    /// given by --config, then defaults.
    Serve(Box<ServeCmd>),
    /// Replay a block-hash trace through every eviction policy and report hit ratios.
    Sim(recache_eviction::sim::SimArgs),
    /// Benchmarks that print JSON (`recache bench --help` lists them). Run by the
    /// recache-bench binary, which must sit beside this one (`cargo build --release -p
    /// recache -p recache-bench`).
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Bench {
        /// The benchmark and its flags, passed to recache-bench as they are.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<OsString>,
    },
    /// Catalog tools: `recache items index` builds the retrieval index.
    // Run by recache-bench, which parses (and prints the help of) `items` as `recache items`.
    #[command(disable_help_flag = true, disable_version_flag = true)]
    Items {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
        args: Vec<OsString>,
    },
}

#[derive(Args, Debug)]
struct ServeCmd {
    #[command(flatten)]
    args: ServeArgs,
    /// Print every setting, its value and where it came from (flag, environment variable,
    /// --config file or default), check that they resolve, and exit (non-zero if they do not)
    #[arg(long)]
    print_config: bool,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RECACHE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    // The matches are kept: --print-config says where each value came from.
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Serve(cmd) if cmd.print_config => {
            let serve = matches
                .subcommand_matches("serve")
                .context("serve's arguments")?;
            print!("{}", recache::config::print::describe(serve)?);
            match cmd.args.resolve() {
                Ok(_) => {
                    println!("# resolves: ok");
                    Ok(())
                }
                Err(e) => {
                    println!("# resolves: no: {e}");
                    std::process::exit(2);
                }
            }
        }
        Command::Serve(cmd) => serve_blocking(cmd.args),
        Command::Bench { args } => Err(hand_off(args)),
        Command::Items { args } => {
            let mut all = vec![OsString::from("items")];
            all.extend(args);
            Err(hand_off(all))
        }
        // The plot is drawn by recache-bench (plotting is no part of this binary); the
        // simulation itself runs here.
        Command::Sim(args) if args.plot.is_some() => {
            let mut all = vec![OsString::from("sim")];
            all.extend(std::env::args_os().skip(2));
            Err(hand_off(all))
        }
        Command::Sim(args) => Ok(recache_eviction::sim::run(&args, None)?),
    }
}

/// The benchmarks' binary, beside this executable.
const BENCH_BIN: &str = "recache-bench";

/// Runs `recache-bench ARGS` in place of this process (its exit status and output are the
/// command's); returns only the error when it cannot be started.
fn hand_off(args: Vec<OsString>) -> anyhow::Error {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return anyhow::anyhow!("recache bench: locating the recache executable: {e}"),
    };
    let bin = exe.with_file_name(format!("{BENCH_BIN}{}", std::env::consts::EXE_SUFFIX));
    if !bin.is_file() {
        return anyhow::anyhow!(
            "`recache bench`, `recache items` and `recache sim --plot` run the {BENCH_BIN} \
             binary, and there is none beside {}: build it with `cargo build --release -p recache -p {BENCH_BIN}` \
             (or `cargo build -p {BENCH_BIN}` for target/debug)",
            exe.display()
        );
    }
    let mut cmd = std::process::Command::new(&bin);
    cmd.args(args);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // exec replaces this process: signals, stdin/stdout and the exit status are the
        // benchmark's own.
        let e = cmd.exec();
        anyhow::anyhow!("running {}: {e}", bin.display())
    }
    #[cfg(not(unix))]
    {
        match cmd.status() {
            Ok(status) => std::process::exit(status.code().unwrap_or(1)),
            Err(e) => anyhow::anyhow!("running {}: {e}", bin.display()),
        }
    }
}

/// Resolves the settings first (they say how many threads the runtime gets), then serves.
fn serve_blocking(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.resolve()?;
    let runtime = match config.worker_threads {
        // One thread: accept loop, connections and the engine client share it, so a request
        // never waits for a wake-up from another thread.
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    }
    .context("starting the tokio runtime")?;
    runtime.block_on(serve(config))
}

async fn serve(config: recache::config::Config) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(
        listen = %listener.local_addr()?,
        upstreams = ?config.upstreams.iter().map(|u| u.to_string()).collect::<Vec<_>>(),
        engine = %config.engine,
        "recache serving"
    );
    let admin = match config.admin_listen {
        Some(addr) => {
            let l = TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --admin-listen {addr}"))?;
            tracing::info!(admin_listen = %l.local_addr()?, "admin API on its own port");
            Some(l)
        }
        None => None,
    };
    let state = recache::service::AppState::new(config).context("starting")?;
    // Label check, item pool adoption and catalog precompute, once a replica is healthy.
    let _startup = recache::rank::startup::spawn(state.ranker.clone());
    // The item pool's store (--rank-pool-store), probed for /ready.
    let _store_probe = (state.ranker.rank.store.as_ref())
        .map(|p| p.spawn(recache::itempool::store_probe::PROBE_EVERY));
    // Alg. 1's costs measured while serving (with a store).
    let _cost_meter = (state.ranker.rank.pool.clone()).and_then(|p| {
        let engine = state.ranker.engine.clone();
        recache::itempool::costs::spawn(p, engine, recache::itempool::costs::MEASURE_EVERY)
    });
    let drained = recache::server::run_with_admin(listener, admin, state, shutdown_signal()).await;
    if !drained {
        anyhow::bail!("exited with requests still in flight after the drain deadline");
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops recache");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
        _ = term.recv() => tracing::info!("SIGTERM received"),
    }
}
