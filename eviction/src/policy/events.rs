//! What the cache tells a policy about an access ([`AccessEvent`] with its [`RequestCtx`] and,
//! for GR traffic, the [`EntityCtx`] of the block) and asks it with ([`EvictCtx`]). Plain
//! numbers only, so predictors can turn them into feature rows.

use crate::BlockId;
use crate::trace::SegmentKind;

/// Where a block sits in the request that touched it (feature input). Positions are within
/// the block's *chain* (its path from the tree root): a plain request is one chain, a GR
/// request may be several (a user's chain, one per pooled item, ...).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCtx {
    /// Blocks in the chain.
    pub req_len: u32,
    /// Leading blocks of the chain that were resident when it arrived.
    pub hit_len: u32,
    /// This block's position in the chain (0 = first).
    pub pos: u32,
    /// Prompt length in tokens, when the source knows it (single-chain requests only: for a
    /// multi-chain request it does not describe one chain).
    pub input_tokens: Option<u64>,
    /// The chain's deepest hit block (its conversation's previous turn).
    pub anchor: Option<BlockId>,
    /// The chain's last block (the whole prompt this block is part of).
    pub tip: Option<BlockId>,
    /// What the block holds, when the source knows it (GR traces).
    pub entity: Option<EntityCtx>,
}

/// A GR block's entity context, from the trace's segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntityCtx {
    pub kind: SegmentKind,
    /// User id (kind user) or item id (kind item); None for runs of candidates and the rest.
    pub entity: Option<u64>,
    /// Whether the request put the user first (true) or pooled items first (false); None
    /// when its segments say neither.
    pub user_first: Option<bool>,
    /// Position within the segment and the segment's length, in blocks.
    pub seg_pos: u32,
    pub seg_len: u32,
}

/// One block access (hit, or insert of a missing block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AccessEvent {
    pub block: BlockId,
    pub depth: u32,
    pub time: u64,
    pub ctx: RequestCtx,
}

/// Context of a victim request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvictCtx {
    pub now: u64,
    /// The block whose insertion needs the space (LARU checks it).
    pub incoming: Option<BlockId>,
}
