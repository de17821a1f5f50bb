//! `bench gr --replay-out FILE` (with `--trace-only`): the planned stream as each mode's
//! recache rewrote it, for a replay on another machine (`shim/gpu-replay`: plain PyTorch on a
//! GPU, no vLLM, no Rust). Where the GR block trace (`--trace-out`) keeps block ids for the
//! cache simulator, this file keeps what a replay needs to compute the same prompts: per request
//! the layout recache chose, the profile's length and the items in prompt order with their
//! lengths; and, first, the memory split `--kv-bytes` gives the pool modes (engine blocks, pool
//! bytes, the precomputed items), so the replay holds the same items at equal memory.
//!
//! Line 1: `{"header": true, ...}`; then one line per mode and request:
//! `{"mode", "i", "at_ms", "user", "kind": "user"|"item", "user_tokens", "items": [ids],
//! "item_tokens": [lens, label included], "tokens"}`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Value, json};

use super::args::GrArgs;
use super::memory::Memory;
use crate::error::BenchError;
use recache::harness::{PrefixKind, rank_api as api, rank_pipeline as pipeline};

/// The replay file being written.
pub struct ReplayOut {
    path: PathBuf,
    out: Mutex<std::io::BufWriter<std::fs::File>>,
}

impl ReplayOut {
    /// Creates `path` and writes the header: the run's shape and the memory split.
    pub fn create(path: &Path, args: &GrArgs, memory: &Memory) -> Result<Self, BenchError> {
        let file = std::fs::File::create(path).map_err(BenchError::io(format!(
            "--replay-out: creating {}",
            path.display()
        )))?;
        let me = Self {
            path: path.to_path_buf(),
            out: Mutex::new(std::io::BufWriter::new(file)),
        };
        me.write(&header(args, memory))?;
        Ok(me)
    }

    /// One rewritten request of `mode`.
    pub fn request(
        &self,
        mode: &str,
        i: usize,
        at_ms: u64,
        req: &api::Validated,
        prepared: &pipeline::Prepared,
    ) -> Result<(), BenchError> {
        self.write(&line(mode, i, at_ms, req, prepared))
    }

    fn write(&self, v: &Value) -> Result<(), BenchError> {
        let mut out = match self.out.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        writeln!(out, "{v}").map_err(BenchError::io(format!("writing {}", self.path.display())))
    }

    pub fn finish(&self) -> Result<(), BenchError> {
        let mut out = match self.out.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        out.flush()
            .map_err(BenchError::io(format!("writing {}", self.path.display())))
    }
}

fn header(args: &GrArgs, memory: &Memory) -> Value {
    json!({
        "header": true,
        "workload": args.workload.name(),
        "seed": args.seed,
        "candidates": args.candidates,
        "block_size": args.block_size,
        "kv_token_bytes": args.token_bytes(),
        "kv_bytes": memory.total_bytes(memory.plain),
        "equal_memory": memory.equal,
        "plain_kv_blocks": memory.plain.kv_blocks,
        "pooled_kv_blocks": memory.pooled.kv_blocks,
        "pool_bytes": memory.pooled.pool_bytes,
        // Items are keyed as the requests name them (their catalog ids, as text).
        "pool_items": memory.pool_items.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
    })
}

fn line(
    mode: &str,
    i: usize,
    at_ms: u64,
    req: &api::Validated,
    prepared: &pipeline::Prepared,
) -> Value {
    let items: Vec<&str> = (prepared.prompt.labels.iter())
        .map(|&(_, k)| req.items.get(k).map_or("", |it| it.key.as_str()))
        .collect();
    json!({
        "mode": mode,
        "i": i,
        "at_ms": at_ms,
        "user": req.user.key,
        "kind": match prepared.kind {
            PrefixKind::User => "user",
            PrefixKind::Item => "item",
        },
        "user_tokens": prepared.user_len,
        "items": items,
        "item_tokens": prepared.item_lens,
        "tokens": prepared.prompt.tokens.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::Layout;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: GrArgs,
    }

    fn parse(extra: &[&str]) -> Result<GrArgs, clap::Error> {
        let base = [
            "gr",
            "--data",
            "d.txt",
            "--items",
            "i.json",
            "--upstream",
            "http://u",
        ];
        Cli::try_parse_from(base.iter().chain(extra)).map(|c| c.args)
    }

    /// The replay file comes from the rewrite-only run: without --trace-only it is refused.
    #[test]
    fn replay_out_needs_trace_only() {
        assert!(parse(&["--replay-out", "r.jsonl"]).is_err());
        let ok = parse(&[
            "--trace-out",
            "t.jsonl",
            "--trace-only",
            "--replay-out",
            "r.jsonl",
        ]);
        assert!(ok.is_ok_and(|a| a.replay_out.is_some()));
    }

    /// The header carries the pool modes' split, so a replay holds the same items at the
    /// same memory as the plain modes.
    #[test]
    fn header_has_the_memory_split() -> Result<(), clap::Error> {
        let args = parse(&["--kv-token-bytes", "1000", "--block-size", "16"])?;
        let memory = Memory {
            block_bytes: 16_000,
            equal: true,
            plain: Layout {
                kv_blocks: 100,
                pool_bytes: 0,
            },
            pooled: Layout {
                kv_blocks: 40,
                pool_bytes: 960_000,
            },
            pool_items: vec![7, 3],
            user_tokens: 0,
            threshold: 0.0,
        };
        let h = header(&args, &memory);
        assert_eq!(h["kv_bytes"], 1_600_000);
        assert_eq!(h["pooled_kv_blocks"], 40);
        assert_eq!(h["pool_bytes"], 960_000);
        assert_eq!(h["pool_items"], json!(["7", "3"]));
        assert_eq!(h["kv_token_bytes"], 1000);
        Ok(())
    }
}
