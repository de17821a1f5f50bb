//! How a ranking prompt is read (`--rank-readout`, the `/v1/rank` field `readout`): which
//! token's log-probability at the prompt's last position scores each candidate.
//!
//! - `label`: the label token that introduces the candidate in the prompt (`rank::layout`).
//!   The model must read which label sits next to the item it prefers; with the item pool, a
//!   pooled item's label is its pool slot's (`itempool`), one of thousands, each seen rarely
//!   in training.
//! - `item`: the candidate's own first token, for models trained to name the next item (an
//!   item-id token, a semantic id's first code). No label is read, so a pooled item scores as
//!   any other. The testbed ranker, trained with that loss too (`aux_item`), ranks better this
//!   way in the pooled layout than user-first does with labels (docs/quality.md). Needs every
//!   candidate of a request to start with a distinct token: a request where two do not is
//!   refused with a 400 naming them.
//! - `auto` (default): `item` for a prompt served from the item pool whose candidates all
//!   start with distinct tokens, `label` otherwise. Chosen on dev users (docs/quality.md,
//!   `pool-readout-dev.json`): pooled, the item token beats the slot labels by 0.08 Recall@10;
//!   user-first and item-first without the pool, labels are as good or better. A model that
//!   never learnt to name items should be served with `label`.
//!
//! The prompt itself does not change; only the scored tokens do ([`apply`], after the prompt
//! is built, so the pipeline, the quality guard's shadow and the trace see one prompt).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::layout::Prompt;
use crate::error::ApiError;

/// Which token scores a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Readout {
    /// `item` where the prompt is pooled and the first tokens are distinct, else `label`.
    #[default]
    Auto,
    /// The label token introducing the candidate in the prompt.
    Label,
    /// The candidate's own first token.
    Item,
}

impl Readout {
    pub fn as_str(self) -> &'static str {
        match self {
            Readout::Auto => "auto",
            Readout::Label => "label",
            Readout::Item => "item",
        }
    }

    /// The readout a prompt gets: `auto` decided for it (`pooled`: it is served from the item
    /// pool; `items`: the candidates' tokens), the others as they are.
    pub fn resolve(self, pooled: bool, items: &[&[u32]]) -> Readout {
        if self != Readout::Auto {
            return self;
        }
        let mut seen = std::collections::HashSet::with_capacity(items.len());
        let distinct = items
            .iter()
            .all(|t| t.first().is_some_and(|&f| seen.insert(f)));
        if pooled && distinct {
            Readout::Item
        } else {
            Readout::Label
        }
    }
}

impl fmt::Display for Readout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Readout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Readout::Auto),
            "label" => Ok(Readout::Label),
            "item" => Ok(Readout::Item),
            other => Err(format!("readout '{other}': expected auto, label or item")),
        }
    }
}

/// Makes `prompt` score each candidate by `readout` (resolved first, see
/// [`Readout::resolve`]): with `item`, the scored token of prompt position k becomes the first
/// token of request item `prompt.labels[k].1` (`items` by request index). `ids`: the request's
/// item ids, to name the culprits of an error. Returns the readout applied.
pub fn apply(
    prompt: &mut Prompt,
    items: &[&[u32]],
    ids: &[&str],
    readout: Readout,
    pooled: bool,
) -> Result<Readout, ApiError> {
    let readout = readout.resolve(pooled, items);
    if readout != Readout::Item {
        return Ok(readout);
    }
    let bad = |message: String| ApiError::BadRequest {
        message,
        param: Some("readout".into()),
    };
    let mut seen: HashMap<u32, usize> = HashMap::with_capacity(prompt.labels.len());
    for (scored, i) in prompt.labels.iter_mut() {
        let first = (items.get(*i).and_then(|t| t.first()).copied())
            .ok_or_else(|| bad(format!("readout item: item {:?} has no tokens", ids[*i])))?;
        if let Some(j) = seen.insert(first, *i) {
            return Err(bad(format!(
                "readout item scores each candidate by its first token, and items {:?} and \
                 {:?} both start with token {first}; use readout label for this request",
                ids[j], ids[*i]
            )));
        }
        *scored = first;
    }
    Ok(Readout::Item)
}

#[cfg(test)]
#[path = "readout_tests.rs"]
mod tests;
