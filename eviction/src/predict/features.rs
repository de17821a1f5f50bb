//! Feature rows and training labels for the learned predictor (LCR §3.2,
//! §5.1), with no LightGBM dependency so it is testable on its own.
//!
//! A row describes a block *at one access*: its last 10 inter-access deltas,
//! 10 exponentially decayed access counters, its depth and tokens from the
//! root, where it sat in the request, and the conversation's recency: the gap
//! since the previous turn (the previous access of the request's deepest hit
//! block) and the gap before that. Frequency alone is the wrong signal on
//! conversation traces (a turn's newest blocks were used once, yet the next
//! turn comes back to them); the conversation gaps and the position from the
//! end of the prompt carry the recency structure.
//!
//! Those are the `base` columns; rows also carry the `gr` entity columns
//! ([`super::entity`]) and the upper-bound `future` columns
//! ([`super::foresight`]). Which of them a model uses is the configured
//! [`FeatureSet`] ([`super::feature_set`]).
//!
//! Label: time until the block's next access, as ln(1 + Δ), or the horizon
//! when no access came within it (censored). Rows enter a sliding window.

use std::collections::VecDeque;
use std::sync::Arc;

use super::entity::Entities;
use super::feature_set::{AGE_COL, BASE, FUTURE, GR};
pub use super::feature_set::{ALL, FeatureSet};
use super::foresight::Foresight;
use crate::BlockId;
use crate::hash::FastMap;
use crate::policy::AccessEvent;

pub const DELTAS: usize = 10;
pub const COUNTERS: usize = 10;
/// `base` features per row (today's 31 columns).
pub const NF: usize = BASE;
/// A full row: every column of every set ([`ALL`] wide).
pub type Row = [f32; ALL];

/// Feature names, in full-row order (for model dumps and debugging).
pub fn names() -> Vec<String> {
    let mut v: Vec<String> = (0..DELTAS).map(|i| format!("delta{i}")).collect();
    v.extend((0..COUNTERS).map(|i| format!("decay{i}")));
    for n in [
        "depth",
        "tokens",
        "fill",
        "req_len",
        "hit_len",
        "from_end",
        "is_hit",
        "conv_gap",
        "conv_gap2",
        "conv_count",
        "count",
        "kind",
        "user_first",
        "seg_pos",
        "seg_from_end",
        "seg_len",
        "ent_decay16",
        "ent_decay128",
        "ent_decay1024",
        "ent_decay8192",
        "ent_gap",
        "ent_gap2",
        "ent_count",
        "future_tip_gap",
        "future_entity_gap",
        "age",
    ] {
        v.push(n.to_string());
    }
    v
}

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub struct FeatureConfig {
    /// Tokens per block (Mooncake: 512).
    pub block_tokens: u32,
    /// Censoring horizon in time units (requests in the simulator).
    pub horizon: u64,
    /// Labelled rows kept for training.
    pub window_rows: usize,
    /// A censored row (no access within the horizon) is labelled
    /// horizon × this, so "not reused" ranks behind every observed reuse.
    pub censored_mult: f32,
    /// The columns models are trained on and read (default `base`).
    #[serde(default)]
    pub set: FeatureSet,
    /// Which accesses make training rows (default: every block's).
    #[serde(default)]
    pub rows: TrainRows,
}

/// Which accesses become training rows. Every access still builds the block's prediction row.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum TrainRows {
    /// One row per block access.
    #[default]
    Block,
    /// One row per radix node: of a run of consecutive blocks of one chain that one access
    /// touches with the same history (same access count, same previous access, same segment
    /// kind), only the deepest makes a row. A conversation turn's new blocks are one node, a
    /// GR request's candidate run another, so the window spans ~20x more requests.
    Node,
}

impl Default for FeatureConfig {
    fn default() -> Self {
        Self {
            block_tokens: 512,
            horizon: 2000,
            window_rows: 20_000,
            censored_mult: 1.0,
            set: FeatureSet::BASE,
            rows: TrainRows::Block,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Hist {
    last: u64,
    count: u32,
    deltas: [f32; DELTAS],
    decay: [f32; COUNTERS],
}

/// Counter `i` halves every 2^(i+1) time units: its factor over a gap `d`.
fn decay_factor(d: f32, i: usize) -> f32 {
    (-d * std::f32::consts::LN_2 / (1u32 << (i + 1)) as f32).exp()
}

/// Gaps below this have their decay factors tabulated ([`DecayTable`]).
const TABLE_GAPS: usize = 4096;

/// The counters' decay factors for every gap below `TABLE_GAPS`, computed once with the
/// same expression as for larger gaps, so a looked-up factor is bit-identical to a computed
/// one. Why: ten `exp` calls per access were the largest item of a feature row; gaps are
/// integers, and below the censoring horizon (2,000 by default; a block idle that long
/// starts a new history) nearly every gap is small.
#[derive(Debug)]
struct DecayTable(Vec<[f32; COUNTERS]>);

impl Default for DecayTable {
    fn default() -> Self {
        Self(
            (0..TABLE_GAPS)
                .map(|d| std::array::from_fn(|i| decay_factor(d as f32, i)))
                .collect(),
        )
    }
}

impl DecayTable {
    fn factors(&self, gap: u64) -> [f32; COUNTERS] {
        match usize::try_from(gap).ok().and_then(|g| self.0.get(g)) {
            Some(f) => *f,
            None => std::array::from_fn(|i| decay_factor(gap as f32, i)),
        }
    }
}

impl Hist {
    fn access(&mut self, t: u64, table: &DecayTable) {
        if self.count > 0 {
            let gap = t - self.last;
            self.deltas.copy_within(0..DELTAS - 1, 1);
            self.deltas[0] = gap as f32;
            for (c, f) in self.decay.iter_mut().zip(table.factors(gap)) {
                *c *= f;
            }
        }
        for c in &mut self.decay {
            *c += 1.0;
        }
        self.last = t;
        self.count += 1;
    }
}

/// A block's state: its access history (dropped once idle for the horizon), the row of its
/// latest access (for prediction while the block is cached, and as the row waiting for its
/// label), and whether each use of that row is live.
#[derive(Debug, Clone)]
struct Slot {
    hist: Option<Hist>,
    row: Row,
    /// Access time of `row` while it waits for its label.
    pending_since: Option<u64>,
    /// The block is cached: `row` is its prediction row.
    resident: bool,
    /// `row` becomes a training row once labelled ([`TrainRows`]).
    train: bool,
}

impl Slot {
    fn empty() -> Self {
        Self {
            hist: None,
            row: [0.0; ALL],
            pending_since: None,
            resident: false,
            train: true,
        }
    }

    fn unused(&self) -> bool {
        self.hist.is_none() && self.pending_since.is_none() && !self.resident
    }
}

/// What [`TrainRows::Node`] compares consecutive accesses by.
#[derive(Debug, Clone, Copy, PartialEq)]
struct PrevAccess {
    block: BlockId,
    time: u64,
    tip: Option<BlockId>,
    pos: u32,
    /// (access count, previous access) before this access; a new block is (0, 0).
    history: (u32, u64),
    kind: Option<crate::trace::SegmentKind>,
}

/// The idle ages (time units) at which the `age` set repeats a training row and
/// re-predicts a block: 0, then powers of 4.
pub fn age_steps() -> impl Iterator<Item = u64> {
    std::iter::once(0).chain((1..32).map(|i| 1u64 << (2 * i)))
}

/// The first age step above `age`: when a prediction made at `age` is due again.
pub fn next_age_step(age: u64) -> u64 {
    age_steps().find(|&a| a > age).unwrap_or(u64::MAX)
}

/// Per-block history, the latest row of each block, and the labelled window.
#[derive(Debug, Default)]
pub struct Features {
    cfg: FeatureConfig,
    /// `cfg.set`'s columns, in row order.
    cols: Vec<usize>,
    /// What is kept per block, in one map: one lookup per access instead of one per kind.
    blocks: FastMap<BlockId, Slot>,
    entities: Entities,
    decay: DecayTable,
    foresight: Option<Arc<Foresight>>,
    /// Access order, to censor rows older than the horizon.
    order: VecDeque<(u64, BlockId)>,
    /// The previous access, to find radix-node boundaries ([`TrainRows::Node`]).
    prev: Option<PrevAccess>,
    /// Labelled rows, oldest first.
    pub window: VecDeque<(Row, f32)>,
    /// Labelled rows produced so far.
    pub labelled: u64,
    /// Of those, rows censored (no access within the horizon).
    pub censored: u64,
}

impl Features {
    pub fn new(cfg: FeatureConfig) -> Self {
        Self {
            cols: cfg.set.columns(),
            cfg,
            ..Self::default()
        }
    }

    /// Fills the `future` columns from the trace's future (upper-bound runs only).
    pub fn with_foresight(mut self, foresight: Arc<Foresight>) -> Self {
        self.foresight = Some(foresight);
        self
    }

    /// The columns of the configured set, in row order.
    pub fn columns(&self) -> &[usize] {
        &self.cols
    }

    pub fn config(&self) -> &FeatureConfig {
        &self.cfg
    }

    fn push_label(&mut self, row: Row, delta: u64) {
        let censored = delta >= self.cfg.horizon;
        let cap = (self.cfg.horizon as f32 * self.cfg.censored_mult).ln_1p();
        if censored {
            self.censored += 1;
        }
        if !self.cfg.set.contains(FeatureSet::AGE) {
            self.push_row(
                row,
                if censored {
                    cap
                } else {
                    (delta as f32).ln_1p()
                },
            );
            return;
        }
        // The row again at each idle age the block reached, labelled with the time left.
        let reached = delta.min(self.cfg.horizon);
        for a in age_steps().take_while(|&a| a < reached.max(1)) {
            let mut r = row;
            r[AGE_COL] = a as f32;
            let y = if censored {
                cap
            } else {
                ((delta - a) as f32).ln_1p()
            };
            self.push_row(r, y);
        }
    }

    fn push_row(&mut self, row: Row, y: f32) {
        self.window.push_back((row, y));
        while self.window.len() > self.cfg.window_rows {
            self.window.pop_front();
        }
        self.labelled += 1;
    }

    /// Conversation recency for a request at `now`, from the history of its
    /// deepest hit block as it was before this request.
    fn conv(&self, block: Option<BlockId>, now: u64) -> [f32; 3] {
        let Some(h) = block.and_then(|b| self.blocks.get(&b)?.hist.as_ref()) else {
            return [-1.0, -1.0, 0.0];
        };
        if h.last == now {
            [
                h.deltas[0],
                if h.count > 2 { h.deltas[1] } else { -1.0 },
                (h.count - 1) as f32,
            ]
        } else {
            let prev = if h.count > 1 { h.deltas[0] } else { -1.0 };
            [(now - h.last) as f32, prev, h.count as f32]
        }
    }

    /// Records an access: labels the block's previous row, builds its new one.
    pub fn observe(&mut self, ev: &AccessEvent) {
        let t = ev.time;
        let waiting = (self.blocks.get_mut(&ev.block))
            .and_then(|s| s.pending_since.take().map(|t0| (t0, s.row, s.train)));
        if let Some((t0, row, true)) = waiting {
            self.push_label(row, t - t0);
        }
        self.censor(t);
        let conv = self.conv(ev.ctx.anchor, t);
        self.node_boundary(ev);
        let slot = self.blocks.entry(ev.block).or_insert_with(Slot::empty);
        let h = slot.hist.get_or_insert_with(Hist::default);
        h.access(t, &self.decay);
        let mut row = [0f32; ALL];
        for (i, (r, d)) in row.iter_mut().zip(&h.deltas).enumerate() {
            *r = if i + 1 < h.count as usize { *d } else { -1.0 };
        }
        row[DELTAS..DELTAS + COUNTERS].copy_from_slice(&h.decay);
        let c = &ev.ctx;
        let bt = u64::from(self.cfg.block_tokens);
        let full = u64::from(ev.depth) * bt;
        let (tokens, fill) = match c.input_tokens {
            Some(n) if n < full => (n, (n + bt).saturating_sub(full) as f32 / bt as f32),
            Some(_) => (full, 1.0),
            None => (full, -1.0),
        };
        let f = &mut row[DELTAS + COUNTERS..BASE];
        f[0] = ev.depth as f32;
        f[1] = tokens as f32;
        f[2] = fill;
        f[3] = c.req_len as f32;
        f[4] = c.hit_len as f32;
        f[5] = c.req_len.saturating_sub(c.pos + 1) as f32;
        f[6] = f32::from(u8::from(c.pos < c.hit_len));
        f[7..10].copy_from_slice(&conv);
        f[10] = h.count as f32;
        let (gr, rest) = row[BASE..].split_at_mut(GR);
        let future = &mut rest[..FUTURE];
        self.entities.observe(ev.ctx.entity.as_ref(), t, gr);
        match &self.foresight {
            Some(fs) => fs.columns(ev, self.cfg.horizon, future),
            None => future.fill(-1.0),
        }
        row[AGE_COL] = 0.0;
        slot.row = row;
        slot.pending_since = Some(t);
        slot.resident = true;
        slot.train = true;
        self.order.push_back((t, ev.block));
    }

    /// [`TrainRows::Node`]: the previous access was not its node's deepest block when this one
    /// continues the node; only the deepest keeps its training row.
    fn node_boundary(&mut self, ev: &AccessEvent) {
        let history = (self.blocks.get(&ev.block))
            .and_then(|s| s.hist.as_ref())
            .map_or((0, 0), |h| (h.count, h.last));
        let cur = PrevAccess {
            block: ev.block,
            time: ev.time,
            tip: ev.ctx.tip,
            pos: ev.ctx.pos,
            history,
            kind: ev.ctx.entity.map(|e| e.kind),
        };
        if self.cfg.rows == TrainRows::Node {
            let same = self.prev.is_some_and(|p| {
                p.time == cur.time
                    && p.tip == cur.tip
                    && p.pos + 1 == cur.pos
                    && p.history == cur.history
                    && p.kind == cur.kind
            });
            if let (true, Some(p)) = (same, self.prev) {
                if let Some(s) = self.blocks.get_mut(&p.block) {
                    s.train = false;
                }
            }
        }
        self.prev = Some(cur);
    }

    /// Labels rows that saw no access within the horizon; drops the history
    /// of blocks idle that long (bounds memory).
    fn censor(&mut self, now: u64) {
        while let Some(&(t, b)) = self.order.front() {
            if t + self.cfg.horizon > now {
                break;
            }
            self.order.pop_front();
            let Some(slot) = self.blocks.get_mut(&b) else {
                continue;
            };
            if slot.pending_since == Some(t) {
                slot.pending_since = None;
                slot.hist = None;
                let (row, train) = (slot.row, slot.train);
                if slot.unused() {
                    self.blocks.remove(&b);
                }
                if train {
                    self.push_label(row, self.cfg.horizon);
                }
            }
        }
    }

    /// The block left the cache: its prediction row is no longer needed.
    pub fn forget(&mut self, block: BlockId) {
        if let Some(slot) = self.blocks.get_mut(&block) {
            slot.resident = false;
            if slot.unused() {
                self.blocks.remove(&block);
            }
        }
    }

    pub fn row(&self, block: BlockId) -> Option<&Row> {
        self.blocks
            .get(&block)
            .filter(|s| s.resident)
            .map(|s| &s.row)
    }

    /// The window as a row-major matrix of the configured columns, and labels.
    pub fn training_set(&self) -> (Vec<f32>, Vec<f32>) {
        let mut x = Vec::with_capacity(self.window.len() * self.cols.len());
        let mut y = Vec::with_capacity(self.window.len());
        for (row, label) in &self.window {
            x.extend(self.cols.iter().map(|&c| row[c]));
            y.push(*label);
        }
        (x, y)
    }
}

#[cfg(test)]
#[path = "features_tests.rs"]
mod tests;
