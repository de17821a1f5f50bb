//! The trace generators are deterministic per seed, write files `recache sim` reads back
//! unchanged, and have the shapes their docs promise (prefix-extending conversations; GR
//! segments whose user blocks recur per user and pooled items per item).

use recache_bench::tracegen::{self, adversarial, conv, gr, ml100k, online_qa};
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

/// Per conversation, its requests' indices (in order).
fn by_conversation(conv_of: &[usize]) -> Vec<Vec<usize>> {
    let mut convs: Vec<Vec<usize>> = Vec::new();
    for (i, &c) in conv_of.iter().enumerate() {
        if convs.len() <= c {
            convs.resize(c + 1, Vec::new());
        }
        convs[c].push(i);
    }
    convs
}

fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

fn online_qa_shape(args: &[&str]) -> online_qa::OnlineQaShape {
    use clap::Parser;
    #[derive(Parser)]
    struct A {
        #[command(flatten)]
        s: online_qa::OnlineQaShape,
    }
    A::parse_from(std::iter::once("x").chain(args.iter().copied())).s
}

#[test]
fn online_qa_has_lcrs_gaps_turns_and_growing_prefixes() {
    let shape = online_qa_shape(&["--requests", "30000"]);
    let (t, conv_of) = online_qa::generate_labelled(&shape, 3);
    assert_eq!(t, online_qa::generate(&shape, 3), "deterministic");
    assert_ne!(t, online_qa::generate(&shape, 4));
    assert!(
        t.windows(2).all(|w| w[0].timestamp < w[1].timestamp),
        "time order"
    );
    let convs = by_conversation(&conv_of);
    // Intervening requests between two turns of a conversation: LCR's mean 266, sd 77.5.
    let gaps: Vec<f64> = convs
        .iter()
        .flat_map(|c| c.windows(2).map(|w| (w[1] - w[0] - 1) as f64))
        .collect();
    let (mean, sd) = mean_sd(&gaps);
    assert!((mean - 266.0).abs() < 266.0 * 0.05, "gap mean {mean}");
    assert!((sd - 77.5).abs() < 77.5 * 0.15, "gap sd {sd}");
    // Turns per conversation (those that started early enough to finish): 3.63.
    let done: Vec<f64> = convs
        .iter()
        .filter(|c| c[0] + 5_000 < t.len())
        .map(|c| c.len() as f64)
        .collect();
    let (turns, _) = mean_sd(&done);
    assert!((turns - 3.63).abs() < 0.15, "turns {turns}");
    // Each turn extends the previous prompt's full blocks; the partial block is the request's.
    let bt = shape.block_tokens;
    for c in &convs {
        for w in c.windows(2) {
            let (a, b) = (&t[w[0]], &t[w[1]]);
            let full = (a.input_length.unwrap_or(0) / bt) as usize;
            assert!(b.hash_ids.starts_with(&a.hash_ids[..full]), "prefix grows");
            assert!(b.input_length > a.input_length);
        }
    }
    // Mean prompt near LCR's 3,455 tokens.
    let prompts: Vec<f64> = t
        .iter()
        .map(|r| r.input_length.unwrap_or(0) as f64)
        .collect();
    let (mean_prompt, _) = mean_sd(&prompts);
    assert!(
        (mean_prompt - 3455.0).abs() < 3455.0 * 0.1,
        "prompt {mean_prompt}"
    );
    let path = tmp("qa.jsonl");
    tracegen::write(&path, &t).expect("write");
    assert_eq!(load_mooncake(&path).expect("load"), t);
}

#[test]
fn closed_loop_keeps_n_sessions_with_gaps_near_n() {
    let shape = online_qa_shape(&["--requests", "20000", "--closed-loop", "16"]);
    let (_, conv_of) = online_qa::generate_labelled(&shape, 1);
    let convs = by_conversation(&conv_of);
    let gaps: Vec<f64> = convs
        .iter()
        .flat_map(|c| c.windows(2).map(|w| (w[1] - w[0] - 1) as f64))
        .collect();
    let (mean, _) = mean_sd(&gaps);
    assert!((mean - 15.0).abs() < 1.5, "gap mean {mean}");
    // Never more than 16 conversations between their first and last request at once.
    let mut open = vec![0i32; conv_of.len() + 1];
    for c in &convs {
        open[c[0]] += 1;
        open[c[c.len() - 1] + 1] -= 1;
    }
    let mut live = 0;
    for d in open {
        live += d;
        assert!(live <= 16, "{live} sessions");
    }
}

fn ml100k_shape() -> ml100k::Ml100kShape {
    use clap::Parser;
    #[derive(Parser)]
    struct A {
        #[command(flatten)]
        s: ml100k::Ml100kShape,
    }
    A::parse_from(["x"]).s
}

#[test]
fn ml100k_replays_sessions_in_time_order_with_growing_profiles() {
    // user item rating time: user 1 rates twice in one session, returns a day later; user 2
    // once; lines out of time order.
    let text = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n\
                1\t10\t4\t1000\n2\t11\t3\t1500\n1\t12\t5\t1100\n1\t13\t2\t87400\n";
    let path = tmp("tiny.inter");
    std::fs::write(&path, text).expect("write");
    let inters = ml100k::read_inter(&path).expect("parse");
    assert_eq!(inters.len(), 4);
    let shape = ml100k_shape();
    let t = ml100k::generate(&shape, &inters).expect("shape");
    let times: Vec<u64> = t.iter().filter_map(|r| r.timestamp).collect();
    assert_eq!(
        times,
        vec![1_000_000, 1_500_000, 87_400_000],
        "one request per session"
    );
    let users: Vec<Option<u64>> = t
        .iter()
        .map(|r| r.segments.as_ref().and_then(|s| s[0].entity))
        .collect();
    assert_eq!(users, vec![Some(1), Some(2), Some(1)]);
    // User 1's return: the profile holds two more items and extends the first request's.
    let (a, b) = (&t[0], &t[2]);
    let seg = |r: &recache_eviction::trace::Request| r.segments.as_ref().expect("segments")[0].len;
    assert_eq!(b.input_length, a.input_length.map(|n| n + 2 * 18));
    assert!(seg(b) >= seg(a));
    assert_eq!(b.hash_ids[..seg(a)], a.hash_ids[..seg(a)]);
    assert_eq!(b.user_first(), Some(true));
    // Candidates and instruction are unique to the request.
    let mut seen = std::collections::HashSet::new();
    for r in &t {
        for &h in &r.hash_ids[seg(r)..] {
            assert!(seen.insert(h), "request-unique block {h} repeated");
        }
    }
    let out = tmp("tiny.jsonl");
    tracegen::write(&out, &t).expect("write");
    assert_eq!(load_mooncake(&out).expect("segments add up"), t);
    let bad = tmp("bad.inter");
    std::fs::write(&bad, "h\n1\tx\t3\t5\n").expect("write");
    assert!(ml100k::read_inter(&bad).is_err(), "a bad line is an error");
}

#[test]
#[ignore = "needs the ml-100k file: run examples/data/install-ml100k"]
fn ml100k_real_file_has_daily_return_gaps() {
    let path = ml100k::find_inter().expect("examples/data/install-ml100k first");
    let inters = ml100k::read_inter(&path).expect("parse");
    assert_eq!(inters.len(), 100_000);
    let t = ml100k::generate(&ml100k_shape(), &inters).expect("shape");
    assert!(t.windows(2).all(|w| w[0].timestamp <= w[1].timestamp));
    let mut last = std::collections::HashMap::new();
    let mut gaps = Vec::new();
    for r in &t {
        let u = r.segments.as_ref().and_then(|s| s[0].entity);
        let ts = r.timestamp.unwrap_or(0);
        if let Some(p) = last.insert(u, ts) {
            gaps.push((ts - p) as f64 / 86_400_000.0);
        }
    }
    gaps.sort_by(f64::total_cmp);
    let median = gaps[gaps.len() / 2];
    assert!((2.0..8.0).contains(&median), "median return {median} days");
}
