//! `bench gr --kv-bytes B`: equal memory. Every mode gets B KV bytes in all (B in whole KV
//! blocks): modes without the item pool give all of it to the engine's KV cache; the pool modes
//! split it with BAT's rule ([`super::past_split`]): the requests in flight first, then items
//! and repeat users by how often they are read per token, estimated from a *past period* — the
//! same generator run with another seed for `--past-requests` requests, never the measured
//! stream.
//! The pooled engine gets the whole blocks that are left after the pool's items; the pool
//! gets the rest, so engine cache + pool is B for every mode.
//!
//! Without `--kv-bytes` a pool mode's pool comes on top of the same engine cache as the other
//! modes': `bench gr` refuses that unless `--allow-unequal-memory` says so
//! ([`check_equal`]). A row's `kv_bytes` is always its engine cache + pool.

use super::args::GrArgs;
use super::past_split::{self, PastBudget};
use super::workload::{Data, Planned};
use crate::error::BenchError;
use crate::testbed::Layout;

/// What the modes run with.
#[derive(Debug, Clone)]
pub struct Memory {
    /// Bytes of one engine KV block.
    pub block_bytes: u64,
    /// Every mode has the same engine cache + pool (`--kv-bytes`).
    pub equal: bool,
    /// Modes without the pool.
    pub plain: Layout,
    /// Pool modes: engine blocks + pool bytes.
    pub pooled: Layout,
    /// Items the pool modes keep, most valuable first (catalog item ids); the precompute list.
    pub pool_items: Vec<u64>,
    /// The split's user-prefix tokens and value threshold (with --kv-bytes).
    pub user_tokens: u64,
    pub threshold: f64,
}

impl Memory {
    /// The layout a mode runs with.
    pub fn layout(&self, pooled: bool) -> Layout {
        if pooled { self.pooled } else { self.plain }
    }

    /// Engine KV cache bytes of `layout`.
    pub fn engine_bytes(&self, layout: Layout) -> u64 {
        layout.kv_blocks * self.block_bytes
    }

    /// KV bytes in all of `layout`: engine cache + item pool; 0 when the engine's cache size
    /// is unknown (no `--kv-bytes`, no `--kv-blocks`).
    pub fn total_bytes(&self, layout: Layout) -> u64 {
        match layout.kv_blocks {
            0 => 0,
            _ => self.engine_bytes(layout) + layout.pool_bytes,
        }
    }
}

/// Refuses modes that would run with different memory: a pool mode without `--kv-bytes` gets
/// its pool on top of the engine cache the other modes have. `--allow-unequal-memory` runs
/// them anyway (each row's `kv_bytes` then says what it had).
pub fn check_equal(args: &GrArgs) -> Result<(), BenchError> {
    let pooled: Vec<&str> = (args.modes.iter())
        .filter(|m| m.uses_pool())
        .map(|m| m.name())
        .collect();
    if pooled.is_empty() || args.kv_bytes.is_some() || args.allow_unequal_memory {
        return Ok(());
    }
    Err(BenchError::Setup(format!(
        "modes {} without --kv-bytes get an item pool on top of the same engine KV cache as \
         the other modes: unequal memory. Give --kv-bytes B (every mode B KV bytes in all: \
         engine cache + pool), or --allow-unequal-memory to run them anyway (each row's \
         kv_bytes then says what that mode had)",
        pooled.join(", ")
    )))
}

pub fn plan(args: &GrArgs, data: &Data, past: &[Planned]) -> Result<Memory, BenchError> {
    let block_bytes = args.block_size * args.token_bytes();
    if block_bytes == 0 {
        return Err(BenchError::Setup(
            "--block-size and --kv-token-bytes must be at least 1".into(),
        ));
    }
    let item_tokens = args.item_tokens as u64 + 1; // the label
    let item_bytes = item_tokens * args.token_bytes();
    let Some(asked) = args.kv_bytes else {
        let blocks = args.kv_blocks.unwrap_or(0);
        let n = args
            .pool_items
            .unwrap_or(data.items.len())
            .min(data.items.len());
        return Ok(Memory {
            block_bytes,
            equal: false,
            plain: Layout {
                kv_blocks: blocks,
                pool_bytes: 0,
            },
            pooled: Layout {
                kv_blocks: blocks,
                pool_bytes: n as u64 * item_bytes,
            },
            pool_items: data.items[..n].to_vec(),
            user_tokens: 0,
            threshold: 0.0,
        });
    };
    // Engines are sized in whole blocks: every mode gets the same whole-block total.
    let kv_bytes = asked / block_bytes * block_bytes;
    // The engine must hold every request in flight at its longest (and vLLM's null block).
    let working = args.concurrency as u64 * args.max_prompt_tokens as u64 + args.block_size;
    let split = past_split::split(&PastBudget {
        kv_bytes,
        token_bytes: args.token_bytes(),
        pool_token_bytes: args.token_bytes(),
        working_tokens: working,
        item_tokens,
        data,
        past,
        after_user: false,
    })
    .map_err(|e| BenchError::Setup(format!("--kv-bytes {asked}: {e}")))?;
    let mut chosen = split.pool;
    if let Some(cap) = args.pool_items {
        chosen.truncate(cap);
    }
    let items_bytes = chosen.len() as u64 * item_bytes;
    if items_bytes > kv_bytes {
        return Err(BenchError::Setup(format!(
            "--kv-bytes {asked}: the pool's {} items need {items_bytes} bytes",
            chosen.len()
        )));
    }
    // The pooled engine gets the whole blocks left after the items; the pool the rest.
    let pooled_blocks = (kv_bytes - items_bytes) / block_bytes;
    Ok(Memory {
        block_bytes,
        equal: true,
        plain: Layout {
            kv_blocks: kv_bytes / block_bytes,
            pool_bytes: 0,
        },
        pooled: Layout {
            kv_blocks: pooled_blocks,
            pool_bytes: kv_bytes - pooled_blocks * block_bytes,
        },
        pool_items: chosen.iter().map(|&i| data.items[i]).collect(),
        user_tokens: split.user_tokens,
        threshold: split.threshold,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        gr: GrArgs,
    }

    fn args(extra: &[&str]) -> GrArgs {
        let base = [
            "gr",
            "--data",
            "d",
            "--items",
            "i",
            "--upstream",
            "http://e",
        ];
        Cli::parse_from(base.iter().chain(extra)).gr
    }

    /// 200 items, hotter first; a past period where the hot ones recur and users come back.
    fn world() -> (Data, Vec<Planned>) {
        let data = Data {
            users: vec![],
            items: (0..200).map(|i| 1000 + i).collect(),
            item_counts: (0..200).rev().collect(),
            titles: vec!["t".into()],
        };
        let past = (0..400u64)
            .map(|r| Planned {
                at_s: r as f64,
                user: r % 37,
                history: vec![],
                profile_tokens: 600,
                items: (0..20)
                    .map(|k| 1000 + (r * 7 + k * k) % (20 + 9 * k))
                    .collect(),
            })
            .collect();
        (data, past)
    }

    /// Every mode's engine cache + pool is the same, the whole-block `--kv-bytes`, whatever the
    /// split gives the pool (and when a cap cuts the pool short).
    #[test]
    fn every_mode_gets_the_same_total() {
        let (data, past) = world();
        let block = 32 * 2048;
        for (kv_bytes, extra) in [
            (64 * 1024 * 1024u64, &[][..]),
            (48 * 1024 * 1024 + 12_345, &[][..]),
            (40 * 1024 * 1024, &["--pool-items", "7"][..]),
            (
                80 * 1024 * 1024 + 1,
                &["--concurrency", "2", "--item-tokens", "30"][..],
            ),
        ] {
            let kv = kv_bytes.to_string();
            let mut flags = vec![
                "--kv-bytes",
                kv.as_str(),
                "--max-prompt-tokens",
                "1024",
                "--modes",
                "re,up,bat,ip-pool,bat-pool",
            ];
            flags.extend(extra);
            let a = args(&flags);
            let m = plan(&a, &data, &past).expect("a budget that holds the requests in flight");
            let want = kv_bytes / block * block;
            assert!(m.equal);
            assert!(
                m.pooled.pool_bytes > 0,
                "the hot items go to the pool: {m:?}"
            );
            for mode in &a.modes {
                let layout = m.layout(mode.uses_pool());
                assert_eq!(
                    m.total_bytes(layout),
                    want,
                    "{} under {flags:?}",
                    mode.name()
                );
            }
            let items = m.pool_items.len() as u64 * (a.item_tokens as u64 + 1) * a.token_bytes();
            assert!(
                m.pooled.pool_bytes >= items,
                "the pool holds its items: {m:?}"
            );
            assert!(
                m.pooled.pool_bytes - items < block,
                "and less than a block more"
            );
        }
    }

    /// Without `--kv-bytes` the pool comes on top: refused unless asked for, and then every
    /// row's total says what it had.
    #[test]
    fn unequal_memory_is_refused_unless_asked_for_and_then_reported() {
        let (data, _) = world();
        let e = check_equal(&args(&["--modes", "up,ip-pool"])).expect_err("refused");
        assert!(e.to_string().contains("--allow-unequal-memory"), "{e}");
        assert!(e.to_string().contains("ip-pool"), "{e}");
        check_equal(&args(&["--modes", "up,bat"])).expect("no pool mode");
        check_equal(&args(&["--modes", "ip-pool", "--kv-bytes", "1"])).expect("equal memory");
        let a = args(&[
            "--modes",
            "up,ip-pool",
            "--allow-unequal-memory",
            "--kv-blocks",
            "100",
            "--pool-items",
            "10",
        ]);
        check_equal(&a).expect("asked for");
        let m = plan(&a, &data, &[]).expect("plan");
        assert!(!m.equal);
        let engine = 100 * 32 * 2048;
        assert_eq!(m.total_bytes(m.plain), engine);
        assert_eq!(
            m.total_bytes(m.pooled),
            engine + 10 * 19 * 2048,
            "engine cache + pool"
        );
        let unknown = plan(&args(&["--allow-unequal-memory"]), &data, &[]).expect("plan");
        assert_eq!(
            unknown.total_bytes(unknown.pooled),
            0,
            "engine size unknown: 0"
        );
    }
}
