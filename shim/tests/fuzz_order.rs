//! Fuzz target `order_reader`: the shim's [`OrderReader`] re-reading an eviction-order file
//! that recache (or anything else) replaced with valid, damaged, truncated or re-sealed bytes,
//! or removed. Properties: no panic, no execution over 1 s; the reader holds exactly what
//! `Order::decode` makes of the file whenever the file's (mtime, size, inode) stamp changed
//! (and keeps what it had when it did not, as documented); `rank` gives each listed hash its
//! first position and `UNRANKED` otherwise; `state` is `Absent` iff nothing valid is held.
//!
//! 2 s by default; longer:
//! `RECACHE_FUZZ_SECONDS=60 cargo test -p recache-shim --test fuzz_order -- --nocapture`.

#[path = "../../adapters/tests/fuzzkit/mod.rs"]
mod fuzzkit;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use fuzzkit::{mutate, run};
use recache_adapters::order::Order;
use recache_shim::order::{OrderReader, OrderState, UNRANKED};

type Stamp = (i64, i64, u64, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.mtime(), m.mtime_nsec(), m.len(), m.ino()))
}

#[test]
fn order_reader() {
    let dir = std::env::temp_dir().join(format!("recache-fuzz-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("order.bin");
    let tmp = dir.join("order.tmp");
    let mut reader = OrderReader::new(path.clone());
    let mut expected: Option<Order> = None;
    let mut last_stamp: Option<Stamp> = None;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    run(
        "order_reader",
        |rng| {
            let o = Order {
                publish_unix_ms: if rng.one_in(2) { now_ms } else { rng.int() },
                generation: rng.int(),
                seq: rng.int(),
                victims: (0..rng.below(30)).map(|_| rng.int() % 64).collect(),
            };
            let bytes = o.encode();
            let mut input = vec![rng.below(10) as u8];
            if rng.one_in(3) {
                let mut b = mutate(rng, &bytes, &[]);
                if rng.one_in(2) && b.len() >= 8 {
                    let n = b.len() - 8;
                    let sum = recache_hash::fnv1a(b[..n].iter().copied());
                    b[n..].copy_from_slice(&sum.to_le_bytes());
                }
                input.extend(b);
            } else {
                input.extend(bytes);
            }
            input
        },
        |input| {
            let (op, bytes) = (input[0], &input[1..]);
            if op == 0 {
                let _ = std::fs::remove_file(&path);
            } else {
                // The writer's way: a temp file renamed into place.
                std::fs::write(&tmp, bytes).expect("write temp order");
                std::fs::rename(&tmp, &path).expect("rename order");
            }
            reader.refresh();
            let now = stamp(&path);
            if now.is_none() {
                expected = None;
            } else if now != last_stamp {
                expected = Order::decode(bytes).ok();
            }
            last_stamp = now;
            assert_eq!(reader.order(), expected.as_ref());
            let held = reader.order().cloned().unwrap_or_default();
            for (i, h) in held.victims.iter().enumerate() {
                let first = held.victims.iter().position(|x| x == h).unwrap_or(i);
                assert_eq!(reader.rank(*h), first as u64);
            }
            for h in (60..70).filter(|h| !held.victims.contains(h)) {
                assert_eq!(reader.rank(h), UNRANKED);
            }
            let state = reader.state(60_000);
            assert_eq!(state == OrderState::Absent, reader.order().is_none());
            if reader.order().is_some_and(|o| o.publish_unix_ms >= now_ms) {
                assert_eq!(
                    state,
                    OrderState::Fresh,
                    "an order from now (or later) is fresh"
                );
            }
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
}
