//! An adversarial trace for learned eviction: the rule that tells which blocks come back
//! flips every epoch, slower than a model notices, so an online model (trained on the recent
//! past, with "never came back" labels that arrive only at its censoring horizon) predicts
//! backwards.
//!
//! Conversations (a shared system block, `first_blocks` blocks, `turn_blocks` more per turn)
//! return quickly (next turn due an exponential gap of mean `gap` requests later) in every
//! epoch; what flips is how long they last. In *short* epochs a conversation stops after its
//! second turn; in *long* epochs it goes on to `long_turns` turns. A model that learned "a
//! block used twice is dead" keeps evicting the blocks of conversations that, in a long
//! epoch, come back six more times; one that learned "used twice, comes back" keeps the dead
//! second turns of a short epoch. LRU does not care; predictions hurt, and LARU's guard has
//! to notice. (Measured with the defaults, LightGBM predictor: FPB 0.98× LRU at 10%
//! capacity; the class-by-length flip tried first was learned around: FPB 1.03× LRU.)

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::rng::Rng;
use recache_eviction::BlockId;
use recache_eviction::trace::Request;

/// Shape of the adversarial trace.
#[derive(Debug, Clone, clap::Args)]
pub struct AdversarialShape {
    /// Requests to generate.
    #[arg(long, default_value_t = 12_000)]
    pub requests: usize,
    /// Requests per epoch (short and long epochs alternate, short first).
    #[arg(long, default_value_t = 3_000)]
    pub epoch: u64,
    /// Blocks of a first turn after the system block.
    #[arg(long, default_value_t = 8)]
    pub first_blocks: usize,
    /// Blocks each later turn appends.
    #[arg(long, default_value_t = 2)]
    pub turn_blocks: usize,
    /// Mean requests between a conversation's turns (exponential).
    #[arg(long, default_value_t = 400.0)]
    pub gap: f64,
    /// Turns of a conversation in a long epoch (2 in a short one).
    #[arg(long, default_value_t = 8)]
    pub long_turns: u32,
}

/// The trace for `shape` and `seed` (deterministic).
pub fn generate(shape: &AdversarialShape, seed: u64) -> Vec<Request> {
    let mut rng = Rng::new(seed);
    let system: BlockId = 0;
    let mut next_id: BlockId = 0;
    // (turns so far, chain)
    let mut convs: Vec<(u32, Vec<BlockId>)> = Vec::new();
    let mut due: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut out = Vec::with_capacity(shape.requests);
    for t in 0..shape.requests as u64 {
        let long = (t / shape.epoch.max(1)) % 2 == 1;
        let limit = if long { shape.long_turns } else { 2 };
        let (c, add) = match due.peek() {
            Some(&Reverse((at, c))) if at <= t => {
                due.pop();
                (c, shape.turn_blocks)
            }
            _ => {
                convs.push((0, vec![system]));
                (convs.len() - 1, shape.first_blocks)
            }
        };
        let (turns, chain) = &mut convs[c];
        for _ in 0..add {
            next_id += 1;
            chain.push(next_id);
        }
        *turns += 1;
        let hash_ids = chain.clone();
        if *turns < limit {
            let gap = rng.exponential(shape.gap).round() as u64;
            due.push(Reverse((t + 1 + gap, c)));
        } else {
            *chain = Vec::new();
        }
        out.push(Request {
            timestamp: Some(t),
            input_length: Some(hash_ids.len() as u64 * 512),
            output_length: Some(1),
            hash_ids,
            segments: None,
        });
    }
    out
}
