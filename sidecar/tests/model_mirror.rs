//! The KV-event mirror against a reference model (issue 20 items 1 and 2), fuzz target
//! `kv_mirror`: each input is a sequence of published batches (sequence number + msgpack
//! payload) with stores of chained blocks, removals (inner blocks and unknown hashes too),
//! clears, duplicate batches, sequence gaps and engine restarts; a third of the inputs get
//! byte-level damage. Every batch goes through `decode_frames` (undecodable ones are skipped,
//! as the feed skips them), then [`SeqTracker`] with the routing feed's resync rule (a gap or a
//! restart clears the mirror, a duplicate is skipped), then into the real [`Mirror`] and into a
//! reference written from the mirror's doc: a map hash → copy count (each store adds a copy,
//! each removal takes one, orphans stay), plus its issue counters. After every event: the same
//! hashes and counters, and every published content id maps to a cached block holding it.
//!
//! 2 s by default; longer:
//! `RECACHE_FUZZ_SECONDS=60 cargo test -p recache --test model_mirror -- --nocapture`.

#[path = "../../adapters/tests/fuzzkit/mod.rs"]
mod fuzzkit;

use std::collections::{HashMap, HashSet};

use fuzzkit::{Rng, mutate, run};
use recache::kvloop::mirror::{ApplyIssues, Mirror};
use recache_adapters::kv_events::{KvEvent, SeqCheck, SeqTracker, decode_frames};
use rmpv::Value as Mp;

#[derive(Default)]
struct Reference {
    copies: HashMap<u64, u32>,
    last_seq: Option<u64>,
    issues: ApplyIssues,
}

impl Reference {
    /// False for a duplicate batch (skipped); clears on a gap or a restart.
    fn sequence(&mut self, seq: u64) -> bool {
        match self.last_seq {
            Some(l) if l == seq => return false,
            Some(l) if l.checked_add(1) != Some(seq) => self.copies.clear(),
            _ => {}
        }
        self.last_seq = Some(seq);
        true
    }

    fn apply(&mut self, ev: &KvEvent) {
        match ev {
            KvEvent::BlockStored {
                block_hashes,
                parent,
                token_ids,
                block_size,
            } => {
                let bs = *block_size as usize;
                if bs == 0 || token_ids.len() != bs * block_hashes.len() {
                    self.issues.bad_tokens += 1;
                }
                if parent.is_some_and(|p| !self.copies.contains_key(&p)) {
                    self.issues.unknown_parent += 1;
                }
                for h in block_hashes {
                    *self.copies.entry(*h).or_default() += 1;
                }
            }
            KvEvent::BlockRemoved { block_hashes } => {
                for h in block_hashes {
                    match self.copies.get_mut(h) {
                        Some(1) => drop(self.copies.remove(h)),
                        Some(n) => *n -= 1,
                        None => self.issues.unknown_removed += 1,
                    }
                }
            }
            KvEvent::AllBlocksCleared => self.copies.clear(),
        }
    }
}

fn agree(m: &Mirror, r: &Reference) {
    assert_eq!(m.len(), r.copies.len(), "distinct cached hashes");
    let hashes: HashSet<u64> = m.iter().map(|(h, _, _)| h).collect();
    assert_eq!(hashes, r.copies.keys().copied().collect::<HashSet<_>>());
    assert_eq!(m.issues, r.issues, "issue counters");
    let content: HashMap<u64, Option<u64>> = m.iter().map(|(h, c, _)| (h, c)).collect();
    for c in m.content_ids() {
        let h = m.hash_of(c).expect("a listed content id has a hash");
        assert_eq!(
            content.get(&h),
            Some(&Some(c)),
            "content id {c} maps to block {h}, which does not hold it"
        );
    }
    for (_, _, depth) in m.iter() {
        assert!(depth >= 1);
    }
}

fn event(rng: &mut Rng) -> Mp {
    let s = |x: &str| Mp::from(x);
    let h = |rng: &mut Rng| Mp::from(rng.below(12) as u64);
    match rng.below(10) {
        0..=4 => {
            let n = 1 + rng.below(3);
            let bs = 1 + rng.below(2);
            let len = if rng.one_in(8) { rng.below(6) } else { n * bs };
            let parent = if rng.one_in(3) { Mp::Nil } else { h(rng) };
            Mp::Map(vec![
                (s("type"), s("BlockStored")),
                (
                    s("block_hashes"),
                    Mp::Array((0..n).map(|_| h(rng)).collect()),
                ),
                (s("parent_block_hash"), parent),
                (
                    s("token_ids"),
                    Mp::Array((0..len).map(|_| Mp::from(rng.below(3))).collect()),
                ),
                (s("block_size"), Mp::from(bs)),
            ])
        }
        5..=8 => Mp::Map(vec![
            (s("type"), s("BlockRemoved")),
            (
                s("block_hashes"),
                Mp::Array((0..1 + rng.below(3)).map(|_| h(rng)).collect()),
            ),
        ]),
        _ => Mp::Map(vec![(s("type"), s("AllBlocksCleared"))]),
    }
}

/// Input: per batch an 8-byte BE sequence number, a u16 LE payload length and the payload.
fn generate(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    let mut seq = rng.int();
    for _ in 0..1 + rng.below(30) {
        seq = match rng.below(12) {
            0 => seq,                                       // duplicate
            1 => seq.wrapping_add(2 + rng.below(5) as u64), // gap
            2 => rng.below(3) as u64,                       // restart
            _ => seq.wrapping_add(1),
        };
        let events = Mp::Array((0..rng.below(5)).map(|_| event(rng)).collect());
        let mut payload = Vec::new();
        rmpv::encode::write_value(&mut payload, &Mp::Array(vec![Mp::F64(0.0), events]))
            .expect("encode to a Vec");
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&(payload.len() as u16).to_le_bytes());
        out.extend(payload);
    }
    if rng.one_in(3) {
        mutate(rng, &out, &[])
    } else {
        out
    }
}

#[test]
fn kv_mirror() {
    run("kv_mirror", generate, |mut input| {
        let (mut mirror, mut reference, mut tracker) =
            (Mirror::new(), Reference::default(), SeqTracker::new());
        while input.len() >= 10 {
            let len = usize::from(u16::from_le_bytes([input[8], input[9]]));
            let end = (10 + len).min(input.len());
            let frames = [b"kv".as_slice(), &input[..8], &input[10..end]];
            input = &input[end..];
            let Ok(batch) = decode_frames(&frames) else {
                continue;
            };
            // The routing feed's rule (client/mirror/feed.rs).
            let fresh = match tracker.check(batch.seq) {
                SeqCheck::Duplicate => false,
                SeqCheck::InOrder => true,
                SeqCheck::Gap { .. } | SeqCheck::Restart { .. } => {
                    mirror.clear();
                    true
                }
            };
            assert_eq!(
                fresh,
                reference.sequence(batch.seq),
                "sequence verdict for {}",
                batch.seq
            );
            if !fresh {
                continue;
            }
            agree(&mirror, &reference);
            for ev in &batch.events {
                mirror.apply(ev);
                reference.apply(ev);
                agree(&mirror, &reference);
            }
        }
    });
}
