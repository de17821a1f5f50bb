//! Structure-aware JSON inputs for the fuzz harness ([`super::fuzzkit`]): a valid seed value
//! with one node swapped for a value of another type, a huge number, a deep nesting, a long or
//! odd string, a key removed or an unknown key added; then, sometimes, byte-level damage
//! ([`crate::fuzzkit::mutate`]) on the serialised text. Include it next to the kit:
//! `#[path = "…/fuzzkit/json.rs"] mod fuzzjson;` (it needs the crate to depend on serde_json).

#![allow(dead_code)]

use serde_json::{Map, Value, json};

use crate::fuzzkit::{Rng, mutate};

/// Largest serialised input; bigger ones are replaced by a seed.
pub const MAX_INPUT: usize = 256 * 1024;

/// A random JSON value of any type, `depth` levels at most.
pub fn random_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth == 0 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => json!(rng.int()),
        3 => json!(-(rng.below(1000) as i64) - 1),
        4 => json!(*rng.pick(&[0.5, -1.5, 1e300, -0.0, f64::MAX, 1e-300])),
        5 => Value::String(random_string(rng)),
        6 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        _ => Value::Object(
            (0..rng.below(4))
                .map(|_| (random_string(rng), random_value(rng, depth - 1)))
                .collect(),
        ),
    }
}

pub fn random_string(rng: &mut Rng) -> String {
    match rng.below(8) {
        0 => String::new(),
        1 if rng.one_in(8) => "x".repeat(rng.below(5000)),
        2 => (*rng.pick(&[
            "\u{0}", "\u{fffd}", "é", "🦀", "\"", "\\", "\n", "model", "prompt",
        ]))
        .to_string(),
        _ => format!("k{}", rng.below(20)),
    }
}

/// A value nested `n` levels deep in arrays or objects.
pub fn deep(rng: &mut Rng, n: usize) -> Value {
    let mut v = Value::Null;
    for _ in 0..n {
        // Not `json!([v])`: that serialises `v` again at each level (quadratic).
        v = if rng.one_in(2) {
            Value::Array(vec![v])
        } else {
            Value::Object(Map::from_iter([("a".to_string(), v)]))
        };
    }
    v
}

/// A random node of `v`: a walk from the root that stops at each level with chance 1/3
/// (enumerating every path would be quadratic on deeply nested values).
fn random_node<'a>(rng: &mut Rng, v: &'a mut Value) -> &'a mut Value {
    if rng.one_in(3) {
        return v;
    }
    let n = match &*v {
        Value::Array(a) => a.len(),
        Value::Object(o) => o.len(),
        _ => 0,
    };
    if n == 0 {
        return v;
    }
    let i = rng.below(n);
    match v {
        Value::Array(a) => random_node(rng, &mut a[i]),
        Value::Object(o) => match o.values_mut().nth(i) {
            Some(child) => random_node(rng, child),
            None => unreachable!("index below the object's length"),
        },
        _ => unreachable!("only containers have children"),
    }
}

/// One structural mutation of `v` in place.
pub fn mutate_value(rng: &mut Rng, v: &mut Value) {
    let target = random_node(rng, v);
    match rng.below(7) {
        0 => *target = random_value(rng, 2),
        1 => *target = json!(*rng.pick(&[u64::MAX, 1 << 53, u32::MAX as u64 + 1])),
        2 => {
            let d = 10 + rng.below(300);
            *target = deep(rng, d);
        }
        3 => match target {
            Value::Object(o) if !o.is_empty() => {
                let k = o
                    .keys()
                    .nth(rng.below(o.len()))
                    .cloned()
                    .unwrap_or_default();
                o.remove(&k);
            }
            Value::Array(a) if !a.is_empty() => {
                a.remove(rng.below(a.len()));
            }
            _ => *target = Value::Null,
        },
        4 => {
            if let Value::Object(o) = target {
                o.insert(random_string(rng), random_value(rng, 2));
            } else if let Value::Array(a) = target {
                // Many copies of a scalar, few of a container: repeated on nested arrays,
                // 200 copies would multiply into millions of nodes.
                let x = a.first().cloned().unwrap_or(Value::Null);
                let n = if x.is_array() || x.is_object() {
                    3
                } else {
                    200
                };
                a.extend(std::iter::repeat_n(x, 1 + rng.below(n)));
            }
        }
        5 => *target = Value::Array(vec![target.take()]),
        _ => *target = Value::Object(Map::from_iter([("x".to_string(), target.take())])),
    }
}

/// A fuzz input from JSON seeds: 1..3 structural mutations, then byte damage one time in three.
pub fn input(rng: &mut Rng, seeds: &[Value], raw: &[Vec<u8>]) -> Vec<u8> {
    let mut v = rng.pick(seeds).clone();
    if !rng.one_in(8) {
        for _ in 0..1 + rng.below(3) {
            mutate_value(rng, &mut v);
        }
    }
    let mut text = serde_json::to_vec(&v).unwrap_or_default();
    if text.len() > MAX_INPUT {
        // Keep executions short: an oversized value falls back to its seed.
        text = rng.pick(raw).clone();
    }
    if rng.one_in(3) {
        mutate(rng, &text, raw)
    } else {
        text
    }
}
