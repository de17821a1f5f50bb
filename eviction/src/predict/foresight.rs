//! The `future` feature columns: true-future facts about a block's chain and entity, for an
//! upper bound on what a predictor could do if it knew whether the conversation (or user, or
//! item) comes back. Only a simulator has them; a server's predictor never gets a
//! [`Foresight`], and without one the columns are -1.
//!
//! Columns: requests until this chain's tip block (the whole prompt the block belongs to) is
//! next used, and until this block's entity (same kind and id) is next used; `horizon` when
//! not within the horizon, -1 when the block has no entity.

use std::sync::Arc;

use super::entity::entity_key;
use crate::future::FutureIndex;
use crate::hash::FastMap;
use crate::policy::AccessEvent;
use crate::trace::Request;

#[derive(Debug)]
pub struct Foresight {
    blocks: Arc<FutureIndex>,
    entities: FastMap<u64, Vec<u64>>,
}

impl Foresight {
    /// From the trace (request i at time i) and its block future.
    pub fn new(requests: &[Request], blocks: Arc<FutureIndex>) -> Self {
        let mut entities: FastMap<u64, Vec<u64>> = FastMap::default();
        for (t, r) in requests.iter().enumerate() {
            for s in r.segments.iter().flatten() {
                if let Some(id) = s.entity {
                    let v = entities.entry(entity_key(s.kind, id)).or_default();
                    if v.last() != Some(&(t as u64)) {
                        v.push(t as u64);
                    }
                }
            }
        }
        Self { blocks, entities }
    }

    /// Writes the `future` columns of `ev` (see the module doc).
    pub fn columns(&self, ev: &AccessEvent, horizon: u64, out: &mut [f32]) {
        let t = ev.time;
        let capped = |next: Option<u64>| next.map_or(horizon, |n| (n - t).min(horizon)) as f32;
        out[0] = ev
            .ctx
            .tip
            .map_or(-1.0, |tip| capped(self.blocks.next_after(tip, t)));
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
