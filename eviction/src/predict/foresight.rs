//! The `future` feature columns: true-future facts about a block's chain and entity, for an
//! upper bound on what a predictor could do if it knew whether the conversation (or user, or
//! item) comes back. Only a simulator has them; a server's predictor never gets a
//! [`Foresight`], and without one the columns are -1.
//!
//! Columns: requests until this chain's conversation continues, i.e. until its last full
//! block is next used (a later turn extends the prompt; a partial last block is refilled by
//! the next turn, so it never recurs and the block before it stands for the conversation),
//! and until this block's entity (same kind and id: the user, or the pooled item) is next
//! used; `horizon` when not within the horizon, -1 when the block has no entity.

use std::sync::Arc;

use super::entity::entity_key;
use crate::BlockId;
use crate::future::FutureIndex;
use crate::hash::FastMap;
use crate::policy::AccessEvent;
use crate::trace::Request;

#[derive(Debug)]
pub struct Foresight {
    blocks: Arc<FutureIndex>,
    entities: FastMap<u64, Vec<u64>>,
    /// (time, chain tip) -> the chain's last full block, where the tip is partial.
    full_tip: FastMap<(u64, BlockId), BlockId>,
}

impl Foresight {
    /// From the trace (request i at time i), its block future and the tokens per block (to
    /// tell a partial last block from `input_length`).
    pub fn new(requests: &[Request], blocks: Arc<FutureIndex>, block_tokens: u32) -> Self {
        let mut entities: FastMap<u64, Vec<u64>> = FastMap::default();
        let mut full_tip = FastMap::default();
        for (t, r) in requests.iter().enumerate() {
            let n = r.hash_ids.len();
            let partial = r
                .input_length
                .is_some_and(|len| len < n as u64 * u64::from(block_tokens));
            if r.segments.is_none() && partial && n >= 2 {
                full_tip.insert((t as u64, r.hash_ids[n - 1]), r.hash_ids[n - 2]);
            }
            for s in r.segments.iter().flatten() {
                if let Some(id) = s.entity {
                    let v = entities.entry(entity_key(s.kind, id)).or_default();
                    if v.last() != Some(&(t as u64)) {
                        v.push(t as u64);
                    }
                }
            }
        }
        Self {
            blocks,
            entities,
            full_tip,
        }
    }

    /// Writes the `future` columns of `ev` (see the module doc).
    pub fn columns(&self, ev: &AccessEvent, horizon: u64, out: &mut [f32]) {
        let t = ev.time;
        let capped = |next: Option<u64>| next.map_or(horizon, |n| (n - t).min(horizon)) as f32;
        out[0] = ev.ctx.tip.map_or(-1.0, |tip| {
            let tip = self.full_tip.get(&(t, tip)).copied().unwrap_or(tip);
            capped(self.blocks.next_after(tip, t))
        });
        out[1] = match ev
            .ctx
            .entity
            .and_then(|e| Some(entity_key(e.kind, e.entity?)))
        {
            Some(key) => capped(
                self.entities
                    .get(&key)
                    .and_then(|v| v.get(v.partition_point(|&u| u <= t)).copied()),
            ),
            None => -1.0,
        };
    }
}
