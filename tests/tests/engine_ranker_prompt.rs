//! The GR ranker trains on prompts its Python script builds (`examples/testbed/ranker/`);
//! recache serves it the prompts `rank::layout` builds from `bench quality`'s bodies. This
//! checks the two agree, with the stdlib-only Python modules run by the system `python3`:
//!
//! - the constants (label base, most items per request, default instruction);
//! - the layouts, token for token and label for label: user-first, item-first in a given
//!   order, and item-first with pooled items keeping their own labels (`layout::labels`);
//! - a held-out user's request as `bench quality` builds it (profile of the last N history
//!   titles, each title fitted to the item length; candidates' texts) from the same titles,
//!   with titles alone and with item-id tokens first (`--item-id-base`, hp `item_ids`);
//! - the user split: the same held-out and dev users on both sides.
//!
//! Needs `python3` on PATH (any 3.x: the modules use the standard library only); without it
//! the test fails saying so, rather than passing with nothing checked.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};

use recache::rank::config::{DEFAULT_INSTRUCTION, DEFAULT_LABEL_BASE, DEFAULT_MAX_ITEMS};
use recache::rank::layout;
use recache::rank::select::PrefixKind;
use recache_bench::gr::bodies::Titles;
use recache_bench::gr::workload::Data;
use recache_bench::quality::{plan, split};
use serde_json::{Value, json};

const PY: &str = r#"
import json, sys
sys.path.insert(0, sys.argv[1])
from ranker import data, layout
req = json.load(sys.stdin)
out = {"label_base": layout.LABEL_BASE, "max_items": layout.MAX_ITEMS,
       "instruction": layout.DEFAULT_INSTRUCTION, "prompts": [], "bodies": [],
       "split": [[u, data.split_of(u)] for u in req["users"]]}
for c in req["prompts"]:
    if c["pool"] is None:
        t, l = layout.build(c["kind"], c["user"], c["items"], c["order"], c["instr"])
    else:
        hot, res, slots = c["order"], c["pool"]["resident"], c["pool"]["slots"]
        t, l, _ = layout.pooled(c["user"], c["items"], hot, res, slots, c["instr"])
    out["prompts"].append({"tokens": t, "labels": l})
for b in req["bodies"]:
    titles = {int(k): v for k, v in req["titles"].items()}
    text = lambda i: layout.item_text(titles[i % len(titles)], req["item_tokens"], i,
                                      b["id_base"])
    out["bodies"].append({"user": layout.profile([text(i) for i in b["history"]]),
                          "items": [text(i) for i in b["items"]]})
print(json.dumps(out))
"#;

fn python(input: &Value) -> Value {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/testbed");
    let mut child = Command::new("python3")
        .args(["-c", PY])
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run python3 ({e}): this test runs examples/testbed/ranker's stdlib-only \
                 modules with the system python3; install python3 (any 3.x)"
            )
        });
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.to_string().as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python3 ran");
    assert!(out.status.success(), "python3 failed");
    serde_json::from_slice(&out.stdout).expect("python3 printed JSON")
}

/// A small deterministic pseudo-random source (the test's own, not the bench's).
fn lcg(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

#[test]
fn ranker_training_prompts_are_the_prompts_recache_sends() {
    let mut st = 7u64;
    let mut prompts = Vec::new();
    let mut expected = Vec::new();
    for case in 0..12 {
        let n = 3 + (lcg(&mut st) % 6) as usize;
        let user: Vec<u32> = (0..1 + lcg(&mut st) % 9)
            .map(|_| lcg(&mut st) as u32 % 4000)
            .collect();
        let items: Vec<Vec<u32>> = (0..n)
            .map(|_| {
                (0..1 + lcg(&mut st) % 5)
                    .map(|_| lcg(&mut st) as u32 % 4000)
                    .collect()
            })
            .collect();
        let instr: Vec<u32> = vec![11, 12, 13];
        let mut order: Vec<usize> = (0..n).collect();
        order.rotate_left(case % n);
        let refs: Vec<&[u32]> = items.iter().map(|v| v.as_slice()).collect();
        let base = DEFAULT_LABEL_BASE;
        let (kind, pool) = match case % 3 {
            0 => (PrefixKind::User, Value::Null),
            1 => (PrefixKind::Item, Value::Null),
            _ => {
                let resident: Vec<bool> = (0..n).map(|_| lcg(&mut st) % 2 == 0).collect();
                let slots: Vec<Option<u32>> = (0..n)
                    .map(|i| (resident[i] || i == 0).then(|| (lcg(&mut st) % 9000) as u32))
                    .collect();
                (
                    PrefixKind::Item,
                    json!({"resident": resident, "slots": slots}),
                )
            }
        };
        // What recache does: with the pool, resident items first (keeping the given order
        // among themselves), pooled labels where an item has a slot (pipeline.rs).
        let (prompt_order, own) = if let Value::Object(p) = &pool {
            let res: Vec<bool> = serde_json::from_value(p["resident"].clone()).expect("res");
            let slots: Vec<Option<u32>> = serde_json::from_value(p["slots"].clone()).expect("s");
            let perm: Vec<usize> = order
                .iter()
                .copied()
                .filter(|&i| res[i])
                .chain(order.iter().copied().filter(|&i| !res[i]))
                .collect();
            let first = base + DEFAULT_MAX_ITEMS as u32;
            let own = perm.iter().map(|&i| slots[i].map(|s| first + s)).collect();
            (perm, own)
        } else {
            (order.clone(), vec![None; n])
        };
        let labels = layout::labels(base, &own);
        let p = layout::build_labeled(kind, &user, &refs, &prompt_order, &instr, &labels);
        expected.push(json!({"tokens": p.tokens, "labels": p.labels}));
        prompts.push(json!({"kind": kind.as_str(), "user": user, "items": items,
                            "order": order, "instr": instr, "pool": pool}));
    }
    // bench quality's bodies from the same titles.
    let titles: HashMap<usize, Vec<u32>> = (0..7)
        .map(|t| {
            (
                t,
                (0..(t % 4 + 1) as u32)
                    .map(|k| 300 + 10 * t as u32 + k)
                    .collect(),
            )
        })
        .collect();
    let users: Vec<(u64, Vec<u64>)> = (1..=400u64)
        .map(|u| (u, (0..2 + u % 7).map(|k| (u * 13 + k * 5) % 40).collect()))
        .collect();
    let data = Data {
        users,
        items: (0..40).collect(),
        item_counts: (0..40).map(|i| 40 - i).collect(),
        titles: (0..7).map(|t| format!("title {t}")).collect(),
    };
    let (item_tokens, history_items) = (5, 3);
    let cases = plan::cases(&data, 10, item_tokens, history_items, None, 3).expect("cases");
    // Each case twice: titles alone, then with item-id tokens first.
    let mut bodies: Vec<Value> = Vec::new();
    let mut planned: Vec<Value> = Vec::new();
    for id_base in [None, Some(20480u32)] {
        let tb = Titles::from_map(titles.clone()).with_id_base(id_base);
        for c in &cases {
            bodies.push((*tb.body(&c.planned, &data, item_tokens, "m")).clone());
            planned.push(
                json!({"history": c.planned.history, "items": c.planned.items,
                                "id_base": id_base.unwrap_or(0)}),
            );
        }
    }
    let ids: Vec<u64> = (1..=3000).collect();
    let input = json!({
        "prompts": prompts,
        "titles": titles.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<HashMap<_, _>>(),
        "item_tokens": item_tokens,
        "bodies": planned,
        "users": ids,
    });
    let py = python(&input);
    assert_eq!(py["label_base"], json!(DEFAULT_LABEL_BASE));
    assert_eq!(py["max_items"], json!(DEFAULT_MAX_ITEMS));
    assert_eq!(py["instruction"], json!(DEFAULT_INSTRUCTION));
    for (i, (got, want)) in py["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .zip(&expected)
        .enumerate()
    {
        assert_eq!(got, want, "prompt case {i}");
    }
    assert!(!bodies.is_empty());
    assert_eq!(py["bodies"].as_array().map(Vec::len), Some(bodies.len()));
    let first_item = &bodies[cases.len()]["items"][0];
    assert_eq!(
        first_item["tokens"][0],
        json!(20480 + first_item["id"].as_u64().expect("id")),
        "an item's id token leads its text"
    );
    for (got, body) in py["bodies"].as_array().expect("bodies").iter().zip(&bodies) {
        assert_eq!(got["user"], body["user"]["tokens"], "profile");
        let items: Vec<&Value> = body["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| &i["tokens"])
            .collect();
        assert_eq!(
            got["items"]
                .as_array()
                .expect("items")
                .iter()
                .collect::<Vec<_>>(),
            items
        );
    }
    for pair in py["split"].as_array().expect("split") {
        let u = pair[0].as_u64().expect("id");
        let want = if split::held_out(u) {
            "test"
        } else if split::dev(u) {
            "dev"
        } else {
            "train"
        };
        assert_eq!(pair[1], json!(want), "user {u}");
    }
}
