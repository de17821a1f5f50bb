//! An adversarial trace for learned eviction: what predicted reuse in one epoch is wrong in
//! the next, so an online model (trained on the recent past) ranks blocks backwards.
//!
//! Two classes of conversations that a cache can tell apart (short prompts of
//! `short_blocks`, long ones of `long_blocks`, after a shared system prompt) arrive 50/50.
//! Epochs of `epoch` requests alternate which class is *live*: a live conversation's next
//! turn is due an exponential gap (mean `live_gap`) later, so its blocks come back soon; a
//! conversation of the other class never continues. A model trained on epoch k learns
//! "class k comes back" and keeps exactly the blocks that will not return in epoch k + 1.
//! Live conversations are cut at `max_blocks`. LRU does not care which class is live;
//! predictions hurt, and LARU's guard has to notice.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::rng::Rng;
use crate::BlockId;
use crate::trace::Request;

/// Shape of the adversarial trace.
#[derive(Debug, Clone, clap::Args)]
pub struct AdversarialShape {
    /// Requests to generate.
    #[arg(long, default_value_t = 12_000)]
    pub requests: usize,
    /// Requests per epoch (the live class flips at each epoch).
    #[arg(long, default_value_t = 1_500)]
    pub epoch: u64,
    /// Blocks of a short prompt (class 0) after the system prompt.
    #[arg(long, default_value_t = 4)]
    pub short_blocks: usize,
    /// Blocks of a long prompt (class 1) after the system prompt.
    #[arg(long, default_value_t = 20)]
    pub long_blocks: usize,
    /// Blocks a live conversation's next turn appends.
    #[arg(long, default_value_t = 2)]
    pub turn_blocks: usize,
    /// Mean requests between a live conversation's turns (exponential).
    #[arg(long, default_value_t = 150.0)]
    pub live_gap: f64,
    /// Longest conversation, in blocks.
    #[arg(long, default_value_t = 60)]
    pub max_blocks: usize,
}

/// The trace for `shape` and `seed` (deterministic).
pub fn generate(shape: &AdversarialShape, seed: u64) -> Vec<Request> {
    let mut rng = Rng::new(seed);
    let system: BlockId = 0;
    let mut next_id: BlockId = 0;
    let mut convs: Vec<(usize, Vec<BlockId>)> = Vec::new();
    let mut due: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut out = Vec::with_capacity(shape.requests);
    for t in 0..shape.requests as u64 {
        let live = ((t / shape.epoch.max(1)) % 2) as usize;
        let (c, add) = match due.peek() {
            Some(&Reverse((at, c))) if at <= t => {
                due.pop();
                (c, shape.turn_blocks)
            }
            _ => {
                let class = rng.below(2) as usize;
                convs.push((class, vec![system]));
                let n = [shape.short_blocks, shape.long_blocks][class];
                (convs.len() - 1, n)
            }
        };
        let (class, chain) = &mut convs[c];
        for _ in 0..add {
            next_id += 1;
            chain.push(next_id);
        }
        let hash_ids = chain.clone();
        if *class == live && chain.len() + shape.turn_blocks <= shape.max_blocks {
            let gap = rng.exponential(shape.live_gap).round() as u64;
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
