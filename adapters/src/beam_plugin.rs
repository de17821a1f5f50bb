//! The wire format of recache's vLLM endpoint plugin (`recache_shim.retrieve_plugin`, loaded by
//! `VLLM_PLUGINS=recache-retrieve`): the whole constrained beam search of one retrieval run
//! inside vLLM's API server in one call. A replica advertises it by answering `GET` on
//! [`PATH`]; the catalog's codes travel once per replica (the plugin keeps it by digest and
//! answers 409 [`UNKNOWN_INDEX`] for a digest it lacks).

use serde_json::{Value, json};

use crate::scoring::ScoreError;

/// The plugin's route: `GET` advertises it, `POST` runs a search.
pub const PATH: &str = "/recache/v1/beam_search";
/// The plugin's error type for a catalog it does not hold.
pub const UNKNOWN_INDEX: &str = "unknown_index";

/// One search.
#[derive(Debug, Clone, Copy)]
pub struct BeamAsk<'a> {
    pub prompt: &'a [u32],
    pub beam_width: usize,
    pub top_k: usize,
    /// Index positions of items never to return.
    pub exclude: &'a [usize],
    /// [`digest`] of the catalog's codes.
    pub digest: &'a str,
    /// The codes in index order, sent when the replica does not hold the digest yet.
    pub codes: Option<&'a Value>,
}

/// What the plugin answered: items (index position, score) best first, and what it cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BeamAnswer {
    pub items: Vec<(usize, f64)>,
    pub steps: u64,
    pub engine_requests: u64,
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub pruned_beams: u64,
    pub stopped_early: bool,
}

/// The `POST` body.
pub fn body(ask: &BeamAsk<'_>) -> Value {
    let mut b = json!({
        "prompt": ask.prompt, "beam_width": ask.beam_width, "top_k": ask.top_k,
        "exclude": ask.exclude, "index": ask.digest,
    });
    if let Some(c) = ask.codes {
        b["codes"] = c.clone();
    }
    b
}

/// A stable digest of a catalog's codes (FNV-1a over lengths and tokens), naming it to the
/// plugin: the same codes give the same digest in every recache process.
pub fn digest<'a>(codes: impl IntoIterator<Item = &'a [u32]>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |x: u32| {
        for b in x.to_le_bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    };
    for code in codes {
        eat(code.len() as u32);
        code.iter().for_each(|&t| eat(t));
    }
    format!("{h:016x}")
}

/// True when an error answer says the replica lacks the catalog.
pub fn is_unknown_index(answer: &Value) -> bool {
    answer["error"]["type"].as_str() == Some(UNKNOWN_INDEX)
}

/// Reads a 200 answer for a catalog of `catalog` items.
pub fn read(answer: &Value, catalog: usize) -> Result<BeamAnswer, ScoreError> {
    let shape = |what: &str| ScoreError::Shape(format!("the beam search plugin's answer: {what}"));
    let items = (answer["items"].as_array())
        .ok_or_else(|| shape("no items"))?
        .iter()
        .map(|p| match (p[0].as_u64(), p[1].as_f64()) {
            (Some(i), Some(s)) if (i as usize) < catalog => Ok((i as usize, s)),
            _ => Err(shape("an item is not [position in the catalog, score]")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let u = &answer["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    Ok(BeamAnswer {
        items,
        steps: n("steps"),
        engine_requests: n("engine_requests"),
        prompt_tokens: n("prompt_tokens"),
        cached_tokens: n("cached_tokens"),
        pruned_beams: n("pruned_beams"),
        stopped_early: u["stopped_early"].as_bool().unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_carries_codes_only_when_given() {
        let codes = json!([[1, 2], [1, 3]]);
        let mut ask = BeamAsk {
            prompt: &[5, 6],
            beam_width: 4,
            top_k: 2,
            exclude: &[1],
            digest: "d",
            codes: None,
        };
        assert!(body(&ask).get("codes").is_none());
        ask.codes = Some(&codes);
        let b = body(&ask);
        assert_eq!(b["codes"], codes);
        assert_eq!(
            (b["prompt"].clone(), b["exclude"].clone()),
            (json!([5, 6]), json!([1]))
        );
    }

    #[test]
    fn digest_is_stable_and_sees_boundaries() {
        let a: Vec<&[u32]> = vec![&[1, 2], &[3]];
        let b: Vec<&[u32]> = vec![&[1], &[2, 3]];
        assert_eq!(digest(a.clone()), digest(a.clone()));
        assert_ne!(digest(a), digest(b));
    }

    #[test]
    fn reads_answers_and_refuses_bad_shapes() {
        let ok = json!({"items": [[3, -1.5], [0, -2.0]], "usage": {"steps": 3,
            "engine_requests": 40, "prompt_tokens": 900, "cached_tokens": 850,
            "pruned_beams": 2, "stopped_early": true}});
        let a = read(&ok, 4).expect("reads");
        assert!(read(&ok, 3).is_err(), "item 3 of a 3-item catalog");
        assert_eq!(a.items, vec![(3, -1.5), (0, -2.0)]);
        assert_eq!(
            (a.engine_requests, a.cached_tokens, a.stopped_early),
            (40, 850, true)
        );
        assert!(read(&json!({"items": [["x", 1]]}), 4).is_err());
        assert!(read(&json!({}), 4).is_err());
        assert!(is_unknown_index(
            &json!({"error": {"type": "unknown_index"}})
        ));
        assert!(!is_unknown_index(
            &json!({"error": {"type": "invalid_request_error"}})
        ));
    }
}
