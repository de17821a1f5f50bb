//! Stand-alone `recache sim` without the serving crate:
//! `cargo run --release -p recache-eviction --example sim -- --trace FILE ...`
//! (`--plot` needs `recache sim`, which draws it with the recache-bench binary).

use clap::Parser;
use recache_eviction::sim::{SimArgs, run};

#[derive(Parser)]
#[command(
    name = "sim",
    about = "Replay a KV-cache trace against eviction policies"
)]
struct Cli {
    #[command(flatten)]
    args: SimArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match run(&cli.args, None) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("error: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            eprintln!("{msg}");
            std::process::ExitCode::FAILURE
        }
    }
}
