//! LCR §5.2's Online-QA shape: multi-turn conversations whose every prompt carries the whole
//! conversation so far (the prefix grows each turn), with the next turn of a conversation
//! arriving a log-normal number of intervening requests later (LCR: mean 266, sd 77.5, as in
//! the Qwen-Bailian trace), 3.63 turns per conversation on average and a mean prompt of about
//! 3,455 tokens.
//!
//! Process (request i at time i): a turn that is due is served first (ties by due time), else
//! a new conversation starts. A conversation has a geometric number of turns (mean `turns`):
//! whether it goes on is a coin flip at every turn, so nothing the cache sees tells which ones
//! end. The first prompt is a shared system prompt (Zipf over `system_prompts`) plus a
//! log-normal first message; each later turn appends the previous answer (`output_tokens`,
//! LCR fixes 256) and a log-normal new message. Blocks are `block_tokens` tokens of the
//! conversation's token stream: full blocks keep their ids across turns (prefix semantics),
//! the last partial block's id is unique to the request (the next turn refills it).
//!
//! `--closed-loop N` replaces the open-loop gaps with Aibrix-like closed-loop load: `N`
//! sessions each have one request in flight; the next request comes from the session whose
//! response finished first (exponential response times, so any session with equal chance):
//! its conversation's next turn, or a new conversation when the last one ended. Gaps are then
//! about `N - 1` intervening requests.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::rng::{Rng, cumulative};
use recache_eviction::BlockId;
use recache_eviction::trace::Request;

/// Shape of the Online-QA trace (defaults: LCR §5.2's numbers; 32-token blocks as
/// `bench replay` sends each hash id).
#[derive(Debug, Clone, clap::Args)]
pub struct OnlineQaShape {
    /// Requests to generate (LCR's Online-QA: 7,268 over 2,000 conversations).
    #[arg(long, default_value_t = 7_268)]
    pub requests: usize,
    /// Mean turns per conversation (geometric).
    #[arg(long, default_value_t = 3.63)]
    pub turns: f64,
    /// Mean intervening requests between two turns of a conversation (log-normal).
    #[arg(long, default_value_t = 266.0)]
    pub gap_mean: f64,
    /// Standard deviation of the intervening requests (log-normal).
    #[arg(long, default_value_t = 77.5)]
    pub gap_sd: f64,
    /// Aibrix-like closed loop with this many active sessions instead of log-normal gaps
    /// (0: open loop).
    #[arg(long, default_value_t = 0)]
    pub closed_loop: usize,
    /// Shared system prompts (drawn Zipf).
    #[arg(long, default_value_t = 8)]
    pub system_prompts: usize,
    /// Tokens per system prompt.
    #[arg(long, default_value_t = 1024)]
    pub system_tokens: u64,
    /// Median tokens of a first message (log-normal, sigma 0.6).
    #[arg(long, default_value_t = 950.0)]
    pub first_tokens: f64,
    /// Median tokens of a later message (log-normal, sigma 0.6).
    #[arg(long, default_value_t = 200.0)]
    pub turn_tokens: f64,
    /// Tokens of each answer, appended to the next turn's prompt (LCR fixes 256).
    #[arg(long, default_value_t = 256)]
    pub output_tokens: u64,
    #[arg(long, default_value_t = 32)]
    pub block_tokens: u64,
}

/// Log-space (mu, sigma) of a log-normal with the given mean and standard deviation.
pub fn lognormal_params(mean: f64, sd: f64) -> (f64, f64) {
    let mean = mean.max(1e-9);
    let s2 = (1.0 + (sd / mean).powi(2)).ln();
    (mean.ln() - s2 / 2.0, s2.sqrt())
}

/// Closed loop: a session's next request starts a new conversation.
const NEW: usize = usize::MAX;

struct Conv {
    /// Ids of the conversation's full blocks so far.
    chain: Vec<BlockId>,
    /// Tokens of the conversation so far (the next prompt before its new message).
    tokens: u64,
    turns_left: u64,
}

/// The trace for `shape` and `seed` (deterministic).
pub fn generate(shape: &OnlineQaShape, seed: u64) -> Vec<Request> {
    generate_labelled(shape, seed).0
}

/// [`generate`], with each request's conversation number (for checking the shape).
pub fn generate_labelled(shape: &OnlineQaShape, seed: u64) -> (Vec<Request>, Vec<usize>) {
    let mut rng = Rng::new(seed);
    let bt = shape.block_tokens.max(1);
    let mut next_id: BlockId = 0;
    let mut fresh = || {
        next_id += 1;
        next_id
    };
    let sys_blocks = (shape.system_tokens / bt) as usize;
    let systems: Vec<Vec<BlockId>> = (0..shape.system_prompts.max(1))
        .map(|_| (0..sys_blocks).map(|_| fresh()).collect())
        .collect();
    let zipf = cumulative(
        &(0..systems.len())
            .map(|i| 1.0 / (i + 1) as f64)
            .collect::<Vec<_>>(),
    );
    let (mu, sigma) = lognormal_params(shape.gap_mean, shape.gap_sd);
    // Geometric turns with mean m: the conversation goes on with probability 1 - 1/m.
    let go_on = 1.0 - 1.0 / shape.turns.max(1.0);
    let mut convs: Vec<Conv> = Vec::new();
    // (due time, conversation); closed loop: (response finished, session's conversation).
    let mut due: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut clock = 0u64;
    let mut out = Vec::with_capacity(shape.requests);
    let mut conv_of = Vec::with_capacity(shape.requests);
    for t in 0..shape.requests as u64 {
        let next = if shape.closed_loop > 0 {
            // The session whose response finished first sends its next turn, or starts a new
            // conversation when its last one ended.
            if due.is_empty() {
                for _ in 0..shape.closed_loop {
                    due.push(Reverse((rng.exponential(1000.0).round() as u64, NEW)));
                }
            }
            due.pop().and_then(|Reverse((at, c))| {
                clock = at;
                (c != NEW).then_some(c)
            })
        } else {
            match due.peek() {
                Some(&Reverse((at, c))) if at <= t => {
                    due.pop();
                    Some(c)
                }
                _ => None,
            }
        };
        let c = match next {
            Some(c) => {
                let msg = rng.lognormal(shape.turn_tokens, 0.6).round().max(1.0) as u64;
                convs[c].tokens += shape.output_tokens + msg;
                c
            }
            None => {
                let mut turns_left = 0;
                while rng.chance(go_on) {
                    turns_left += 1;
                }
                let msg = rng.lognormal(shape.first_tokens, 0.6).round().max(1.0) as u64;
                convs.push(Conv {
                    chain: systems[rng.weighted(&zipf)].clone(),
                    tokens: sys_blocks as u64 * bt + msg,
                    turns_left,
                });
                convs.len() - 1
            }
        };
        let conv = &mut convs[c];
        let full = (conv.tokens / bt) as usize;
        while conv.chain.len() < full {
            conv.chain.push(fresh());
        }
        let mut hash_ids = conv.chain.clone();
        if conv.tokens % bt > 0 {
            hash_ids.push(fresh());
        }
        conv_of.push(c);
        out.push(Request {
            timestamp: Some(t),
            input_length: Some(conv.tokens),
            output_length: Some(shape.output_tokens),
            hash_ids,
            segments: None,
        });
        if conv.turns_left > 0 {
            conv.turns_left -= 1;
            let at = if shape.closed_loop > 0 {
                // Exponential response times: memoryless, so the next session to finish is
                // any active one with equal chance.
                // (A virtual clock in thousandths of a mean response time.)
                clock + 1 + rng.exponential(1000.0).round() as u64
            } else {
                t + 1 + rng.lognormal(mu.exp(), sigma).round() as u64
            };
            due.push(Reverse((at, c)));
        } else {
            // Finished: free its chain (its blocks are in the emitted requests).
            conv.chain = Vec::new();
            if shape.closed_loop > 0 {
                let at = clock + 1 + rng.exponential(1000.0).round() as u64;
                due.push(Reverse((at, NEW)));
            }
        }
    }
    (out, conv_of)
}
