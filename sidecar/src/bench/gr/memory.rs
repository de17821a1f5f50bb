//! `bench gr --kv-bytes B`: equal memory. Every mode gets B KV bytes in all. Modes without the
//! item pool give all of it to the engine's KV cache; the pool modes split it with BAT's rule
//! (`rank::pool::budget`): the requests in flight first, then items and repeat users by
//! access frequency per token, estimated from a *past period* — the same generator run with
//! another seed for `--past-requests` requests, never the measured stream.

use std::collections::HashMap;

use super::args::GrArgs;
use super::testbed::Layout;
use super::workload::{Data, Planned};
use crate::bench::BenchError;
use crate::rank::pool::budget::{self, Demand, SplitInput};

/// What the modes run with.
#[derive(Debug, Clone)]
pub struct Memory {
    /// Total KV bytes per mode (0 when unknown: no --kv-bytes and no --kv-blocks).
    pub kv_bytes: u64,
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

/// Item and user frequencies of a past period.
fn demands(data: &Data, past: &[Planned], item_tokens: u64) -> (Vec<Demand>, Vec<Demand>) {
    let n = past.len().max(1) as f64;
    let mut item_seen: HashMap<u64, u64> = HashMap::new();
    let mut user_seen: HashMap<u64, (u64, u64)> = HashMap::new();
    for p in past {
        for i in &p.items {
            *item_seen.entry(*i).or_default() += 1;
        }
        let e = user_seen
            .entry(p.user)
            .or_insert((0, p.profile_tokens as u64));
        e.0 += 1;
    }
    let items = data
        .items
        .iter()
        .map(|i| Demand {
            freq: item_seen.get(i).copied().unwrap_or(0) as f64 / n,
            tokens: item_tokens,
        })
        .collect();
    // A user prefix pays off on repeat visits only (the first one computes it).
    let users = user_seen
        .values()
        .map(|&(visits, tokens)| Demand {
            freq: visits.saturating_sub(1) as f64 / n,
            tokens,
        })
        .collect();
    (items, users)
}

pub fn plan(args: &GrArgs, data: &Data, past: &[Planned]) -> Result<Memory, BenchError> {
    let block_bytes = args.block_size * args.kv_token_bytes;
    let item_tokens = args.item_tokens as u64 + 1; // the label
    let item_bytes = item_tokens * args.kv_token_bytes;
    let Some(kv_bytes) = args.kv_bytes else {
        let blocks = args.kv_blocks.unwrap_or(0);
        let n = args
            .pool_items
            .unwrap_or(data.items.len())
            .min(data.items.len());
        return Ok(Memory {
            kv_bytes: blocks * block_bytes,
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
    let (items, users) = demands(data, past, item_tokens);
    // The engine must hold every request in flight at its longest (and vLLM's null block).
    let working = args.concurrency as u64 * args.max_prompt_tokens as u64 + args.block_size;
    let split = budget::split(&SplitInput {
        kv_bytes,
        token_bytes: args.kv_token_bytes,
        working_tokens: working,
        items: &items,
        users: &users,
    })
    .map_err(|e| BenchError::Setup(format!("--kv-bytes {kv_bytes}: {e}")))?;
    let mut chosen = split.pool;
    if let Some(cap) = args.pool_items {
        chosen.truncate(cap);
    }
    let pool_bytes = chosen.len() as u64 * item_bytes;
    Ok(Memory {
        kv_bytes,
        plain: Layout {
            kv_blocks: kv_bytes / block_bytes,
            pool_bytes: 0,
        },
        pooled: Layout {
            kv_blocks: (kv_bytes - pool_bytes) / block_bytes,
            pool_bytes,
        },
        pool_items: chosen.iter().map(|&i| data.items[i]).collect(),
        user_tokens: split.user_tokens,
        threshold: split.threshold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_frequencies_count_items_per_request_and_users_by_repeats() {
        let data = Data {
            users: vec![],
            items: vec![10, 20, 30],
            item_counts: vec![3, 2, 1],
            titles: vec!["t".into()],
        };
        let p = |user, items: &[u64]| Planned {
            at_s: 0.0,
            user,
            history: vec![],
            profile_tokens: 100,
            items: items.to_vec(),
        };
        let past = [p(1, &[10, 20]), p(1, &[10]), p(2, &[30, 10])];
        let (items, users) = demands(&data, &past, 19);
        let f: Vec<f64> = items.iter().map(|d| d.freq).collect();
        assert_eq!(f, [1.0, 1.0 / 3.0, 1.0 / 3.0]);
        let mut u: Vec<f64> = users.iter().map(|d| d.freq).collect();
        u.sort_by(f64::total_cmp);
        assert_eq!(u, [0.0, 1.0 / 3.0]);
    }
}
