//! The `gr` workload's equal memory: every system's replicas get the same KV bytes in all
//! (engine KV cache + item pool). recache's replicas give the pool's items' worth of whole
//! blocks to the item pool (each item its 18 tokens and its label, at the served model's own
//! KV bytes a token: 2 KiB for the tiny and the qwen2-1.5b-shape testbed models); the peers'
//! replicas keep all `--gr-kv-blocks` in the engine's cache and get a pool of one block's
//! bytes, so both sets load the connector and run the same engine code.
//!
//! How many items: by default what recache's own rule pools of one replica's budget, per
//! stream, from the stream's past period (BAT's split, `gr::past_split`, as `bench gr
//! --kv-bytes` does; `route::gr_load::Past::Split`); `--pool-items N` fixes N instead. The
//! split first sets aside the engine's working set, [`working_tokens`]: what vLLM needs to
//! run its batch whatever it caches. (vLLM 0.32's CPU worker reserves one core more for any KV connector,
//! which once gave a pool replica twice a plain one's threads on 2 cores; the testbed now
//! pins the reservation, examples/testbed/launch.py, and the same code path keeps it moot.)

use crate::error::BenchError;
use crate::testbed::{BLOCK_TOKENS, Layout};

/// Tokens an item takes in the pool: gr_load's 18 title tokens and the label.
pub const ITEM_TOKENS: u64 = 19;

/// Tokens vLLM schedules per engine step at most (`max_num_batched_tokens`): vLLM 0.32's
/// default for its CPU build's OpenAI server (`EngineArgs`, `current_platform.is_cpu()`), which
/// the testbed leaves as it is.
pub const ENGINE_STEP_TOKENS: u64 = 2048;

/// Tokens of KV a replica's engine needs for the requests in flight, whatever it caches:
/// one prompt of `max_model_len` (vLLM will not start with less), the next step's
/// [`ENGINE_STEP_TOKENS`], the pooled run the connector loads for that next request (every
/// candidate, at most: vLLM allocates a request's externally loaded tokens on admission,
/// outside the step's budget) and the null block. Not requests in flight × longest prompt:
/// with chunked prefill (on by default) vLLM allocates blocks only for the tokens it
/// schedules, running requests first, and a ranking request (`max_tokens: 1`) ends in the
/// step that finishes its prompt, so at any time one request at most is part-way through its
/// prompt and the others of a step add at most a step's tokens; the open-loop queue waits
/// outside the KV cache. Cached blocks the running requests read are the cache's own.
pub fn working_tokens(max_model_len: usize) -> u64 {
    let pooled_run = crate::route::gr_load::CANDIDATES as u64 * ITEM_TOKENS;
    max_model_len as u64 + ENGINE_STEP_TOKENS + pooled_run + BLOCK_TOKENS
}

/// Each replica's layout in recache's set and in the peers' set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sets {
    pub recache: Layout,
    pub peers: Layout,
    /// Bytes of one engine KV block of the served model.
    pub block_bytes: u64,
}

impl Sets {
    /// KV bytes of one replica's budget the split divides: `kv_blocks` blocks (the one-block
    /// pool both sets get on top is the connector's, not the budget's).
    pub fn budget_bytes(kv_blocks: u64, token_bytes: u64) -> u64 {
        kv_blocks * BLOCK_TOKENS * token_bytes.max(1)
    }

    /// `kv_blocks` per replica in all, each token `token_bytes` of KV; recache's pool holds
    /// `pool_items` items of `pool_token_bytes` a token (`--pool-codec`). The engine must
    /// still hold one `max_model_len` prompt (vLLM keeps one block as its null block).
    pub fn split(
        kv_blocks: u64,
        pool_items: usize,
        max_model_len: usize,
        token_bytes: u64,
        pool_token_bytes: u64,
    ) -> Result<Self, BenchError> {
        let block_bytes = BLOCK_TOKENS * token_bytes.max(1);
        let pool_blocks =
            (pool_items as u64 * ITEM_TOKENS * pool_token_bytes).div_ceil(block_bytes);
        let need = (max_model_len as u64).div_ceil(BLOCK_TOKENS) + 1;
        let engine = kv_blocks.saturating_sub(pool_blocks);
        if engine < need {
            return Err(BenchError::Setup(format!(
                "--gr-kv-blocks {kv_blocks}: recache's replicas would keep {engine} engine blocks \
                 after {pool_blocks} blocks of item pool (--pool-items {pool_items}), fewer than \
                 the {need} one {max_model_len}-token prompt needs; give more blocks or fewer items"
            )));
        }
        Ok(Self {
            recache: Layout {
                kv_blocks: engine,
                pool_bytes: (pool_blocks + 1) * block_bytes,
            },
            peers: Layout {
                kv_blocks,
                pool_bytes: block_bytes,
            },
            block_bytes,
        })
    }

    /// KV bytes of one replica of `layout`: engine cache + pool.
    pub fn replica_bytes(&self, layout: Layout) -> u64 {
        layout.kv_blocks * self.block_bytes + layout.pool_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sets_get_the_same_bytes() {
        let s = Sets::split(1024, 1000, 8192, 2048, 2048).expect("fits");
        // 1,000 items x 19 tokens x 2 KiB = 593.75 blocks: 594 whole blocks.
        assert_eq!(s.recache.kv_blocks, 1024 - 594);
        assert_eq!(s.peers.kv_blocks, 1024);
        assert_eq!(s.replica_bytes(s.recache), s.replica_bytes(s.peers));
        assert_eq!(s.replica_bytes(s.peers), 1025 * 32 * 2048);
        assert!(s.recache.pool_bytes >= 1000 * ITEM_TOKENS * 2048);
    }

    /// A model with another KV size a token: the pool's items take as many blocks of it (the
    /// same count here, as block and item both scale), bytes follow the model's.
    #[test]
    fn the_split_is_in_the_models_own_bytes() {
        let half = Sets::split(1024, 1000, 8192, 1024, 1024).expect("fits");
        assert_eq!(half.recache.kv_blocks, 1024 - 594);
        assert_eq!(half.block_bytes, 32 * 1024);
        assert_eq!(half.replica_bytes(half.peers), 1025 * 32 * 1024);
        assert_eq!(
            half.replica_bytes(half.recache),
            half.replica_bytes(half.peers)
        );
    }

    /// An int8 pool (1,040 bytes a token of the shape model against 2,048) takes about half
    /// the blocks for the same items.
    #[test]
    fn a_smaller_pool_token_takes_fewer_blocks() {
        let s = Sets::split(1024, 1000, 8192, 2048, 1040).expect("fits");
        // 1,000 x 19 x 1,040 bytes = 301.6 blocks of 64 KiB: 302.
        assert_eq!(s.recache.kv_blocks, 1024 - 302);
        assert_eq!(s.replica_bytes(s.recache), s.replica_bytes(s.peers));
    }

    /// The split's working set leaves the engine at least what the refusal below asks.
    #[test]
    fn the_working_set_is_a_prompt_a_step_its_pooled_run_and_the_null_block() {
        assert_eq!(working_tokens(8192), 8192 + 2048 + 1900 + 32);
        let budget = Sets::budget_bytes(1024, 2048);
        let items = (budget / 2048 - working_tokens(8192)) / ITEM_TOKENS;
        let s =
            Sets::split(1024, items as usize, 8192, 2048, 2048).expect("what the split can pool");
        assert!(
            s.recache.kv_blocks * 32 + 32 >= working_tokens(8192),
            "{s:?}"
        );
    }

    #[test]
    fn a_pool_that_leaves_no_room_for_a_prompt_is_refused() {
        let err = Sets::split(600, 1000, 8192, 2048, 2048).expect_err("6 blocks left");
        assert!(err.to_string().contains("--gr-kv-blocks 600"), "{err}");
        assert!(Sets::split(600, 0, 8192, 2048, 2048).is_ok());
    }
}
