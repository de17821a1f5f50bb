//! Route keys: what the cache-aware rules remember about a prompt. A prompt is cut into
//! fixed blocks and each block's key is a hash of it *and every block before it* (a chain),
//! so equal keys mean equal prefixes, as in an engine's own prefix cache. Computed once per
//! request in the pipeline, only when the routing rule asks for them.
//!
//! Token-id prompts are cut every [`TOKENS_PER_KEY`] tokens; text prompts (a completions
//! `prompt` string, a chat `messages` array as sent) every [`BYTES_PER_KEY`] bytes. Only full
//! blocks get a key: a partial tail is never cached by the engine either.

use recache_hash::{finalize, fnv1a_from};

/// Tokens per key of a token-id prompt (the testbed's vLLM block size).
pub const TOKENS_PER_KEY: usize = 32;
/// Bytes per key of a text prompt: about 32 tokens of English text.
pub const BYTES_PER_KEY: usize = 128;
/// Bytes per token assumed when a text prompt's length is estimated.
const BYTES_PER_TOKEN: usize = 4;

/// A prompt's chained block keys and its length in tokens (estimated for text).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RouteKeys {
    pub keys: Vec<u64>,
    pub tokens: usize,
    /// Keys of token ids (the engine loop's block ids, which a replica's KV-event mirror
    /// also holds), not of text.
    pub token_ids: bool,
}

impl RouteKeys {
    /// Keys of the first token prompt (a batch goes to one replica; its first prompt decides),
    /// counting the tokens of all of them.
    pub fn from_tokens(prompts: &[Vec<u32>]) -> Self {
        let tokens = prompts.iter().map(Vec::len).sum();
        let Some(first) = prompts.first() else {
            return Self::default();
        };
        // The engine loop's block ids, so a key here names the same block as its mirror's.
        let keys = recache_hash::blocks::prompt_ids(first, TOKENS_PER_KEY);
        Self {
            keys,
            tokens,
            token_ids: true,
        }
    }

    /// Keys of a text prompt's bytes.
    pub fn from_text(text: &[u8]) -> Self {
        let mut h = 1u64;
        let keys = text
            .chunks_exact(BYTES_PER_KEY)
            .map(|block| {
                h = finalize(fnv1a_from(h, block.iter().copied()));
                h
            })
            .collect();
        Self {
            keys,
            tokens: text.len().div_ceil(BYTES_PER_TOKEN),
            token_ids: false,
        }
    }

    /// Tokens one key stands for (an estimate for text).
    pub fn tokens_per_key(&self) -> usize {
        if self.keys.is_empty() {
            return TOKENS_PER_KEY;
        }
        (self.tokens / self.keys.len()).clamp(1, TOKENS_PER_KEY * 4)
    }
}

#[cfg(test)]
#[path = "keys_tests.rs"]
mod tests;
