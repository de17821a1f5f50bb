//! A Mooncake-style synthetic conversation trace: multi-turn chats over a few shared system
//! prompts, each request the whole conversation so far (prefix semantics), 512-token blocks.
//!
//! Process (request i at time i): a turn that is due is served first, else a new
//! conversation starts. A conversation has 1 + Poisson(`extra_turns`) turns; each next turn
//! is due an exponential gap (mean `turn_gap` requests) after the previous one, so turns
//! arrive as a Poisson process per conversation. The first turn is a system prompt (Zipf
//! over `system_prompts`, `system_blocks` blocks) plus a log-normal number of blocks; each
//! later turn appends a log-normal number (the previous answer and the new question). A
//! prompt's last block is partial: its id is unique to the request (the next turn refills
//! that block, so it hashes differently), as in the Mooncake trace where 99% of final
//! blocks are never reused.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::rng::{Rng, cumulative};
use recache_eviction::BlockId;
use recache_eviction::trace::Request;

/// Shape of the conversation trace (defaults near the Mooncake conversation trace:
/// ~24 blocks per request, ~40% of turns continued).
#[derive(Debug, Clone, clap::Args)]
pub struct ConvShape {
    /// Requests to generate.
    #[arg(long, default_value_t = 12_000)]
    pub requests: usize,
    /// Shared system prompts (drawn Zipf).
    #[arg(long, default_value_t = 16)]
    pub system_prompts: usize,
    /// Blocks per system prompt.
    #[arg(long, default_value_t = 2)]
    pub system_blocks: usize,
    /// Median blocks of a first turn after the system prompt (log-normal, sigma 0.9).
    #[arg(long, default_value_t = 14.0)]
    pub first_blocks: f64,
    /// Median blocks a later turn appends (log-normal, sigma 0.8).
    #[arg(long, default_value_t = 4.0)]
    pub turn_blocks: f64,
    /// Mean turns after the first (Poisson).
    #[arg(long, default_value_t = 0.7)]
    pub extra_turns: f64,
    /// Mean requests between a conversation's turns (exponential).
    #[arg(long, default_value_t = 400.0)]
    pub turn_gap: f64,
}

struct Conv {
    chain: Vec<BlockId>,
    turns_left: u64,
}

/// The trace for `shape` and `seed` (deterministic).
pub fn generate(shape: &ConvShape, seed: u64) -> Vec<Request> {
    let mut rng = Rng::new(seed);
    let mut next_id: BlockId = 0;
    let mut fresh = || {
        next_id += 1;
        next_id
    };
    let systems: Vec<Vec<BlockId>> = (0..shape.system_prompts.max(1))
        .map(|_| (0..shape.system_blocks).map(|_| fresh()).collect())
        .collect();
    let zipf = cumulative(
        &(0..systems.len())
            .map(|i| 1.0 / (i + 1) as f64)
            .collect::<Vec<_>>(),
    );
    let mut convs: Vec<Conv> = Vec::new();
    let mut due: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut out = Vec::with_capacity(shape.requests);
    for t in 0..shape.requests as u64 {
        let c = match due.peek() {
            Some(&Reverse((at, c))) if at <= t => {
                due.pop();
                let n = rng.lognormal(shape.turn_blocks, 0.8).round().max(1.0) as usize;
                convs[c].chain.extend((0..n).map(|_| fresh()));
                c
            }
            _ => {
                let mut chain = systems[rng.weighted(&zipf)].clone();
                let n = rng.lognormal(shape.first_blocks, 0.9).round().max(1.0) as usize;
                chain.extend((0..n).map(|_| fresh()));
                convs.push(Conv {
                    chain,
                    turns_left: rng.poisson(shape.extra_turns),
                });
                convs.len() - 1
            }
        };
        let conv = &mut convs[c];
        let continues = conv.turns_left > 0;
        if continues {
            conv.turns_left -= 1;
            let gap = rng.exponential(shape.turn_gap).round() as u64;
            due.push(Reverse((t + 1 + gap, c)));
        }
        let fill = 1 + rng.below(511);
        let mut hash_ids = conv.chain.clone();
        hash_ids.push(fresh());
        let input = (hash_ids.len() as u64 - 1) * 512 + fill;
        out.push(Request {
            timestamp: Some(t),
            input_length: Some(input),
            output_length: Some(1 + rng.below(800)),
            hash_ids,
            segments: None,
        });
        if !continues {
            // Finished: free its chain (its blocks are in the emitted requests).
            conv.chain = Vec::new();
        }
    }
    out
}
