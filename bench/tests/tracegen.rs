//! The trace generators are deterministic per seed, write files `recache sim` reads back
//! unchanged, and have the shapes their docs promise (prefix-extending conversations; GR
//! segments whose user blocks recur per user and pooled items per item).

use recache_bench::tracegen::{self, adversarial, conv, gr};
use recache_eviction::trace::{SegmentKind, load_mooncake};

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("recache-gen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    dir.join(name)
}

#[test]
fn conversations_are_deterministic_and_extend_their_prefix() {
    use clap::Parser;
    #[derive(Parser)]
    struct A {
        #[command(flatten)]
        s: conv::ConvShape,
    }
    let mut shape = A::parse_from(["x"]).s;
    shape.requests = 2000;
    let a = conv::generate(&shape, 7);
    assert_eq!(a, conv::generate(&shape, 7));
    assert_ne!(a, conv::generate(&shape, 8));
    // Some request extends an earlier one's full blocks (its last block is partial).
    let extends = a.iter().enumerate().any(|(i, r)| {
        a[..i].iter().any(|p| {
            let full = &p.hash_ids[..p.hash_ids.len() - 1];
            full.len() > 2 && r.hash_ids.starts_with(full)
        })
    });
    assert!(extends);
    let path = tmp("conv.jsonl");
    tracegen::write(&path, &a).expect("write");
    assert_eq!(load_mooncake(&path).expect("load"), a);
}

#[test]
fn adversarial_flips_how_long_conversations_last() {
    use clap::Parser;
    #[derive(Parser)]
    struct A {
        #[command(flatten)]
        s: adversarial::AdversarialShape,
    }
    let shape = A::parse_from(["x", "--requests", "4000", "--epoch", "2000"]).s;
    let t = adversarial::generate(&shape, 1);
    assert_eq!(t, adversarial::generate(&shape, 1));
    // Turn number of each request from its length; the longest turn seen per epoch.
    let turn = |r: &recache_eviction::trace::Request| {
        (r.hash_ids.len() - 1 - shape.first_blocks) / shape.turn_blocks + 1
    };
    let short = t[..2000].iter().map(turn).max();
    let long = t[2000..].iter().map(turn).max();
    assert_eq!(short, Some(2), "short epoch: two turns");
    assert_eq!(
        long,
        Some(shape.long_turns as usize),
        "long epoch: up to long_turns"
    );
}

#[test]
fn gr_trace_has_recurring_users_and_items() {
    use clap::Parser;
    #[derive(Parser)]
    struct A {
        #[command(flatten)]
        s: gr::GrShape,
    }
    let shape = A::parse_from(["x", "--requests", "400", "--synth-users", "200"]).s;
    let mut rng = tracegen::rng::Rng::new(3);
    let pop = gr::Population::synthetic(shape.synth_users, shape.synth_items, &mut rng);
    let t = gr::generate(&shape, &pop, 5).expect("shape fits");
    let path = tmp("gr.jsonl");
    tracegen::write(&path, &t).expect("write");
    let back = load_mooncake(&path).expect("segments add up");
    assert_eq!(back, t);
    let (mut user_first, mut item_first) = (0, 0);
    let mut users = std::collections::HashMap::new();
    for r in &t {
        match r.user_first() {
            Some(true) => {
                user_first += 1;
                let segs = r.segments.as_ref().expect("segments");
                assert_eq!(r.chains().len(), 1);
                let n = segs[0].len;
                let prev = users.insert(segs[0].entity, r.hash_ids[..n].to_vec());
                if let Some(p) = prev {
                    assert_eq!(p, r.hash_ids[..n].to_vec(), "a user's profile blocks recur");
                }
            }
            Some(false) => {
                item_first += 1;
                let items = r
                    .entities()
                    .iter()
                    .filter(|e| e.kind == SegmentKind::Item)
                    .count();
                assert_eq!(
                    r.chains().len(),
                    items + 1,
                    "one root chain per item, one rest"
                );
            }
            None => panic!("every GR request is user- or item-first"),
        }
    }
    assert!(
        user_first > 0 && item_first > 0,
        "{user_first} / {item_first}"
    );
}
