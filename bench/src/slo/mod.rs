//! `recache bench slo` (issue 17 item 5): does serving to a deadline pay? The same GR ranking
//! load goes to recache's `/v1/rank` through two real `recache serve` children in front of one
//! engine, `--slo off` (plain) and `--slo on` (slo), at offered loads that are multiples of
//! the engine's measured saturation rate, with open-loop Poisson or bursty gamma arrivals;
//! every request carries `x-recache-deadline-ms`. Per (load, mode): goodput (on time per s),
//! SLO attainment, p50/p99 of admitted requests, refusals.
//!
//! - [`args`]: the command line; [`workload`]: the requests (`bench gr`'s builder);
//! - [`child`]: the two children, engine idleness between runs;
//! - [`calibrate`]: unloaded p50 (the default deadline) and the saturation rate;
//! - [`arrivals`]: Poisson and gamma arrival times; [`send`]: open and closed loops;
//! - [`tally`]: a run's numbers and the rows over repeats; [`report`]: JSON, table, goal;
//!   [`plot`]: the `--png`.
//!
//! Runs are paired: for every load, plain and slo get the same arrival sequence back to back,
//! which goes first alternating per repeat; each run starts on an idle engine with its prefix
//! cache emptied. The children live for the whole bench (as a deployed sidecar would), so the
//! SLO child's cost model has seen the earlier runs.

pub mod args;
pub mod arrivals;
pub mod calibrate;
pub mod child;
pub mod plot;
pub mod report;
pub mod send;
pub mod tally;
pub mod workload;

#[cfg(test)]
mod tests;

pub use args::SloArgs;
use child::{Mode, ServeChild};

use crate::engine_ops;
use crate::error::BenchError;
use crate::http::client;
use crate::progress::Progress;

/// Runs the benchmark. An interrupt (SIGINT/SIGTERM) is `recache-bench`'s main's to handle:
/// it drops this future, and with it the serve children (killed).
pub async fn run(args: SloArgs) -> Result<(), BenchError> {
    args.check()?;
    bench(&args).await
}

async fn bench(args: &SloArgs) -> Result<(), BenchError> {
    let http = client();
    let upstream = args.upstream();
    let wl = workload::Workload::build(&http, args).await?;
    let engine = engine_ops::resolve(&http, &upstream, args.engine).await;
    let plain = ServeChild::start(&http, Mode::Plain, &upstream, engine).await?;
    let slo = ServeChild::start(&http, Mode::Slo, &upstream, engine).await?;
    let url = |c: &ServeChild| format!("{}/v1/rank", c.base);
    let cal = calibrate::run(&http, &url(&plain), &url(&slo), &wl, args).await?;
    let duration_s = args.duration.as_secs_f64();
    let warmup_s = args.warmup.as_secs_f64();
    let mut runs = Vec::new();
    let mut resets_ok = true;
    for repeat in 0..args.repeat {
        for (li, &load) in args.loads.iter().enumerate() {
            let rate = load * cal.saturation_rps;
            let seed = arrivals::seed(args.seed, li, repeat);
            let window = (warmup_s, duration_s);
            let times =
                arrivals::schedule(args.arrivals, rate, args.cv, window, args.exact_count, seed);
            let order = match repeat % 2 {
                0 => [Mode::Plain, Mode::Slo],
                _ => [Mode::Slo, Mode::Plain],
            };
            for (k, mode) in order.into_iter().enumerate() {
                let child = if mode == Mode::Plain { &plain } else { &slo };
                let tag = format!("r{repeat}-l{li}-{}", mode.name());
                let bodies = wl.bodies(times.len(), &args.rank_mode, &tag)?;
                let waited = child::wait_idle(&http, &upstream, args.request_timeout).await;
                if waited > 1.0 {
                    eprintln!("bench slo: waited {waited:.1} s for the engine to drain");
                }
                // Every run starts from an empty prefix cache (salts keep runs apart anyway).
                if let Err(why) = engine_ops::reset_cache(&http, engine, &upstream, false).await
                    && resets_ok
                {
                    resets_ok = false;
                    eprintln!(
                        "bench slo: cannot empty the engine's prefix cache ({why}); going on"
                    );
                }
                let progress =
                    Progress::new(times.len() as u64, format!("{load}x {}", mode.name()));
                let samples = send::open_loop(
                    &http,
                    &url(child),
                    &bodies,
                    &times,
                    args.ask(cal.deadline_ms),
                    args.request_timeout,
                    &progress,
                )
                .await;
                progress.finish();
                let which = tally::Which {
                    load,
                    mode: mode.name(),
                    repeat,
                    first: k == 0,
                    offered_rps: rate,
                    duration_s,
                    deadline_ms: cal.deadline_ms,
                };
                let run = tally::tally_after_warmup(&which, &times, &samples, warmup_s);
                eprintln!(
                    "bench slo: {load}x {:<5} offered {} ok {} on_time {} rejected {} errors {} \
                     goodput {:.3} rps, p99 {:.0} ms",
                    run.mode,
                    run.offered,
                    run.ok,
                    run.on_time,
                    run.rejected,
                    run.errors,
                    run.goodput_rps,
                    run.p99_ms
                );
                runs.push(run);
            }
        }
    }
    let rows = tally::summarize(&runs);
    let facts = report::Facts {
        args,
        engine,
        model: &wl.model,
        cal: &cal,
    };
    if args.json {
        let mut doc = report::document(&facts, &rows, &runs);
        doc["slo_metrics_end"] = slo.slo_metrics(&http).await;
        doc["cache_reset_per_run"] = resets_ok.into();
        println!("{doc}");
    } else {
        print!("{}", report::table(&facts, &rows));
    }
    if let Some(path) = &args.png {
        plot::plot(path, &rows)?;
        eprintln!("bench slo: wrote {}", path.display());
    }
    Ok(())
}
