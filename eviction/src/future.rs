//! The future of a trace: for each block, the request indices at which it is
//! used. Feeds OPT and the oracle predictor; only a simulator has it.

use crate::BlockId;
use crate::hash::FastMap;

#[derive(Debug, Default)]
pub struct FutureIndex {
    uses: FastMap<BlockId, Vec<u64>>,
}

impl FutureIndex {
    /// `requests[i]` is the block list of request i (time i).
    pub fn new<'a>(requests: impl IntoIterator<Item = &'a [BlockId]>) -> Self {
        let mut uses: FastMap<BlockId, Vec<u64>> = FastMap::default();
        for (t, blocks) in requests.into_iter().enumerate() {
            for &b in blocks {
                let v = uses.entry(b).or_default();
                if v.last() != Some(&(t as u64)) {
                    v.push(t as u64);
                }
            }
        }
        Self { uses }
    }

    /// First use of `block` strictly after time `t`.
    pub fn next_after(&self, block: BlockId, t: u64) -> Option<u64> {
        let v = self.uses.get(&block)?;
        v.get(v.partition_point(|&u| u <= t)).copied()
    }

    /// Number of distinct blocks.
    pub fn distinct(&self) -> usize {
        self.uses.len()
    }
}
