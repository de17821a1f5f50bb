//! The `gr` feature columns: what a GR block holds and how hot its entity is.
//!
//! Why: in GR traffic, reuse follows entities, not blocks. A user's profile blocks come back
//! when the user does, and users come back by activity (BAT §2: skewed, with many one-off
//! users); a pooled item's block comes back with the item's popularity (BAT Fig. 2(d): ~90% of
//! accesses on the top 10% of items); candidate runs and instructions inside a user-first
//! prompt are unique to the request and never come back. A block's own history cannot show
//! any of that on its first access; the entity's history (shared by every block of a user's
//! profile, or by an item's block across requests) can.
//!
//! Entity history is counted once per request (the first block of an entity at a new time
//! updates it), keyed by (kind, entity id) so user and item ids never collide.

use crate::hash::{FastMap, mix64};
use crate::policy::EntityCtx;
use crate::trace::SegmentKind;

/// Decayed request counters per entity; half-lives in requests.
pub const HALF_LIVES: [f32; 4] = [16.0, 128.0, 1024.0, 8192.0];

/// The key of an entity's history: kind and id, mixed.
pub fn entity_key(kind: SegmentKind, id: u64) -> u64 {
    mix64(id) ^ kind_code(kind) as u64
}

/// A numeric code per kind (trees split on it): user 0, item 1, items 2, other 3.
pub fn kind_code(kind: SegmentKind) -> u8 {
    match kind {
        SegmentKind::User => 0,
        SegmentKind::Item => 1,
        SegmentKind::Items => 2,
        SegmentKind::Other => 3,
    }
}

#[derive(Debug, Clone, Default)]
struct EntHist {
    last: u64,
    count: u32,
    gaps: [f32; 2],
    decay: [f32; HALF_LIVES.len()],
}

impl EntHist {
    fn access(&mut self, t: u64) {
        if self.count > 0 {
            if t == self.last {
                return;
            }
            let d = (t - self.last) as f32;
            self.gaps = [d, self.gaps[0]];
            for (c, h) in self.decay.iter_mut().zip(HALF_LIVES) {
                *c *= (-d * std::f32::consts::LN_2 / h).exp();
            }
        }
        for c in &mut self.decay {
            *c += 1.0;
        }
        self.last = t;
        self.count += 1;
    }
}

/// Entity histories and the `gr` columns of a row.
#[derive(Debug, Default)]
pub struct Entities {
    hist: FastMap<u64, EntHist>,
}

impl Entities {
    /// Records the access of `ctx`'s entity at `t` (once per request) and writes the `gr`
    /// columns (`out.len()` = [`super::feature_set::GR`]); without context every column is -1.
    pub fn observe(&mut self, ctx: Option<&EntityCtx>, t: u64, out: &mut [f32]) {
        out.fill(-1.0);
        let Some(c) = ctx else {
            return;
        };
        out[0] = f32::from(kind_code(c.kind));
        out[1] = c.user_first.map_or(-1.0, |u| f32::from(u8::from(u)));
        out[2] = c.seg_pos as f32;
        out[3] = c.seg_len.saturating_sub(c.seg_pos + 1) as f32;
        out[4] = c.seg_len as f32;
        let Some(id) = c.entity else {
            return;
        };
        let h = self.hist.entry(entity_key(c.kind, id)).or_default();
        h.access(t);
        out[5..9].copy_from_slice(&h.decay);
        for (i, g) in h.gaps.iter().enumerate() {
            // A gap exists once the entity was seen that many times before.
            out[9 + i] = if (h.count as usize) > i + 1 { *g } else { -1.0 };
        }
        out[11] = h.count as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_counts_once_per_request_and_tracks_gaps() {
        let mut e = Entities::default();
        let ctx = EntityCtx {
            kind: SegmentKind::User,
            entity: Some(7),
            user_first: Some(true),
            seg_pos: 0,
            seg_len: 3,
        };
        let mut row = [0f32; 12];
        e.observe(Some(&ctx), 10, &mut row);
        e.observe(Some(&EntityCtx { seg_pos: 1, ..ctx }), 10, &mut row);
        assert_eq!(row[11], 1.0, "two blocks of one request: one access");
        assert_eq!((row[2], row[3], row[9]), (1.0, 1.0, -1.0));
        e.observe(Some(&ctx), 30, &mut row);
        e.observe(Some(&ctx), 35, &mut row);
        assert_eq!((row[9], row[10], row[11]), (5.0, 20.0, 3.0));
        // An item with the same id is another entity.
        let item = EntityCtx {
            kind: SegmentKind::Item,
            ..ctx
        };
        e.observe(Some(&item), 36, &mut row);
        assert_eq!((row[0], row[11]), (1.0, 1.0));
        e.observe(None, 37, &mut row);
        assert!(row.iter().all(|v| *v == -1.0));
    }
}
