//! Content ids for KV blocks: a chain hash over full blocks of token ids, computed the same
//! way from a prompt the proxy sees and from a `BlockStored` event's `token_ids`, so request
//! arrivals and engine blocks meet without reimplementing vLLM's own (SHA-256, CBOR) block
//! hash. Id of block i = hash(id of block i-1, its tokens); the first block chains from a seed.

/// The chain seed (the "parent" of a prompt's first block).
pub const ROOT: u64 = crate::GOLDEN;

/// The id of the block holding `tokens` after the block with id `parent`.
pub fn chain(parent: u64, tokens: &[u32]) -> u64 {
    // FNV-1a over the parent id and the tokens, then a final mix (splitmix64) so nearby
    // inputs spread over the whole range.
    let bytes = parent
        .to_le_bytes()
        .into_iter()
        .chain(tokens.iter().flat_map(|t| t.to_le_bytes()));
    crate::finalize(crate::fnv1a(bytes))
}

/// Ids of every full block of `tokens` (a trailing partial block is never cached).
pub fn prompt_ids(tokens: &[u32], block_size: usize) -> Vec<u64> {
    let mut parent = ROOT;
    tokens
        .chunks_exact(block_size.max(1))
        .map(|b| {
            parent = chain(parent, b);
            parent
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_share_ids_and_partials_are_dropped() {
        let a: Vec<u32> = (0..100).collect();
        let mut b = a.clone();
        b[70] = 9999;
        let (ia, ib) = (prompt_ids(&a, 32), prompt_ids(&b, 32));
        assert_eq!(ia.len(), 3);
        assert_eq!(ia[..2], ib[..2]);
        assert_ne!(ia[2], ib[2]);
        assert_eq!(ia[1], chain(chain(ROOT, &a[..32]), &a[32..64]));
    }
}
