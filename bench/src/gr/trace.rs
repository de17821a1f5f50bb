//! `bench gr --trace-out`: each mode's GR block trace, as `recache sim --trace` reads it
//! (`rank::trace`). In a run, the mode's in-process recache writes what it sent
//! (`--rank-trace-out`); with `--trace-only` the planned stream is rewritten by the mode's
//! recache and written without being sent, stamped with its planned arrival times, so a trace
//! of tens of thousands of requests takes seconds instead of the engine's hours.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::args::GrArgs;
use super::modes::Mode;
use super::proxy::LocalProxyRun;
use crate::error::BenchError;
use crate::progress::Progress;
use recache::harness::{
    TRACE_BLOCK_TOKENS, rank_api as api, rank_pipeline as pipeline, rank_trace as trace,
};

/// Where one run's trace goes: `base` itself when the command makes one run, else `base` with
/// the mode (and the round and offered load when several) before its extension.
pub fn path_for(base: &Path, args: &GrArgs, mode: Mode, round: usize, rate: f64) -> PathBuf {
    let several_rates = args.rates.len() > 1;
    if args.modes.len() == 1 && args.repeat == 1 && !several_rates {
        return base.to_path_buf();
    }
    let mut tag = mode.name().to_string();
    if args.repeat > 1 {
        tag.push_str(&format!(".r{round}"));
    }
    if several_rates {
        tag.push_str(&format!(".{rate}rps"));
    }
    let stem = base.file_stem().map(|s| s.to_string_lossy().into_owned());
    let name = match (stem, base.extension()) {
        (Some(stem), Some(ext)) => format!("{stem}.{tag}.{}", ext.to_string_lossy()),
        (Some(stem), None) => format!("{stem}.{tag}"),
        (None, _) => format!("trace.{tag}.jsonl"),
    };
    base.with_file_name(name)
}

/// Why a mode cannot be traced without running it, if it cannot.
pub fn refuse_trace_only(mode: Mode) -> Option<String> {
    mode.uses_pool().then(|| {
        format!(
            "--trace-only: mode {} uses the item pool, whose residency comes from the engine's \
             connector (fills and per-request reports); trace it in a real run (--trace-out \
             without --trace-only)",
            mode.name()
        )
    })
}

/// Where `--trace-only` writes: the traces (named from `base`) and the replay file.
pub struct Outputs<'a> {
    pub base: &'a Path,
    pub replay: Option<&'a super::replay_out::ReplayOut>,
}

/// Rewrites `bodies` (arriving at `arrivals_s`) with each mode's recache and writes the traces
/// (and the replay file). `upstream` only tokenizes; nothing is scored.
pub async fn write_only(
    args: &GrArgs,
    upstream: &str,
    engine: recache_adapters::Engine,
    bodies: &[Arc<Value>],
    arrivals_s: &[f64],
    out: Outputs<'_>,
) -> Result<(), BenchError> {
    let base = out.base;
    if let Some(why) = args.modes.iter().find_map(|&m| refuse_trace_only(m)) {
        return Err(BenchError::Setup(why));
    }
    if args.kv_events.is_some() {
        eprintln!(
            "bench gr: --trace-only: nothing reaches the engine, so bat uses its own model of the \
             cache, not --kv-events"
        );
    }
    let kv_blocks = args.kv_blocks.unwrap_or(0);
    for &mode in &args.modes {
        let user_cache = args.user_cache_tokens.unwrap_or(match kv_blocks {
            0 => recache::harness::DEFAULT_USER_CACHE_TOKENS,
            b => ((b - 1) * args.block_size).saturating_sub(args.max_prompt_tokens as u64),
        });
        let run = LocalProxyRun::new(
            upstream,
            None,
            engine,
            mode,
            args,
            (user_cache, kv_blocks, 0),
            None,
        )
        .await?;
        let ranker = run.proxy.server.ranker().clone();
        let path = path_for(base, args, mode, 0, args.rate);
        let sink = trace::TraceSink::create(&path, TRACE_BLOCK_TOKENS).map_err(BenchError::io(
            format!("--trace-out: creating {}", path.display()),
        ))?;
        let bar = Progress::new(bodies.len() as u64, format!("{} trace", mode.name()));
        let salt = format!("{}-trace", mode.name());
        let (mut user_first, mut blocks) = (0usize, 0usize);
        for (i, body) in bodies.iter().enumerate() {
            let mut body = (**body).clone();
            body["mode"] = json!(run.request_mode);
            if !run.salt_per_request {
                body["cache_salt"] = json!(salt);
            } else {
                body["cache_salt"] = json!(format!("{salt}-{i}"));
            }
            let bytes = serde_json::to_vec(&body)
                .map_err(|e| BenchError::Setup(format!("encoding request {i}: {e}")))?;
            let req = api::parse(&bytes, ranker.rank.config.max_items)
                .map_err(|e| BenchError::Setup(format!("request {i}: {e}")))?;
            let prepared = pipeline::prepare(&ranker, &req)
                .await
                .map_err(|e| BenchError::Setup(format!("request {i}: {e}")))?;
            let at_ms = (arrivals_s[i] * 1000.0).round() as u64;
            let line = prepared.trace_line(&req, TRACE_BLOCK_TOKENS, at_ms);
            if let Some(r) = out.replay {
                r.request(mode.name(), i, at_ms, &req, &prepared)?;
            }
            user_first += usize::from(prepared.kind == recache::harness::PrefixKind::User);
            blocks += line.hash_ids.len();
            sink.write(&line);
            bar.inc(1);
        }
        bar.finish();
        sink.flush()
            .map_err(BenchError::io(format!("writing {}", path.display())))?;
        if let Some(r) = out.replay {
            r.finish()?;
        }
        eprintln!(
            "bench gr: {}: wrote {} ({} requests, {} user-first, {} blocks of {} tokens)",
            mode.name(),
            path.display(),
            bodies.len(),
            user_first,
            blocks,
            TRACE_BLOCK_TOKENS
        );
    }
    Ok(())
}
