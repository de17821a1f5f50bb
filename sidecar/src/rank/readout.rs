//! How a ranking prompt is read (`--rank-readout`, the `/v1/rank` field `readout`): which
//! token's log-probability at the prompt's last position scores each candidate.
//!
//! - `label` (default): the label token that introduces the candidate in the prompt
//!   (`rank::layout`). The model must read which label sits next to the item it prefers; with
//!   the item pool, a pooled item's label is its pool slot's (`rank::pool`), one of thousands,
//!   each seen rarely in training.
//! - `item`: the candidate's own first token, for models trained to name the next item (an
//!   item-id token, a semantic id's first code). No label is read, so a pooled item scores as
//!   any other. The testbed ranker, trained with that loss too (`aux_item`), ranks better this
//!   way in the pooled layout than user-first does with labels (docs/quality.md). Needs every
//!   candidate of a request to start with a distinct token: a request where two do not is
//!   refused with a 400 naming them.
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
    /// The label token introducing the candidate in the prompt.
    #[default]
    Label,
    /// The candidate's own first token.
    Item,
}

impl Readout {
    pub fn as_str(self) -> &'static str {
        match self {
            Readout::Label => "label",
            Readout::Item => "item",
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
            "label" => Ok(Readout::Label),
            "item" => Ok(Readout::Item),
            other => Err(format!("readout '{other}': expected label or item")),
        }
    }
}

/// Makes `prompt` score each candidate by `readout`: with `item`, the scored token of prompt
/// position k becomes the first token of request item `prompt.labels[k].1` (`items` by
/// request index). `ids`: the request's item ids, to name the culprits of an error.
pub fn apply(
    prompt: &mut Prompt,
    items: &[&[u32]],
    ids: &[&str],
    readout: Readout,
) -> Result<(), ApiError> {
    if readout == Readout::Label {
        return Ok(());
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rank::layout;
    use crate::rank::select::PrefixKind;

    fn prompt() -> Prompt {
        let items: Vec<&[u32]> = vec![&[70, 71], &[80]];
        layout::build(PrefixKind::User, &[1, 2], &items, &[1, 0], &[9], 100)
    }

    #[test]
    fn item_scores_each_candidate_by_its_first_token_and_keeps_the_prompt() {
        let mut p = prompt();
        let tokens = p.tokens.clone();
        apply(&mut p, &[&[70, 71], &[80]], &["a", "b"], Readout::Item).expect("distinct");
        assert_eq!(p.labels, vec![(80, 1), (70, 0)]);
        assert_eq!(p.tokens, tokens, "the prompt's tokens do not change");
        let mut q = prompt();
        apply(&mut q, &[&[70, 71], &[80]], &["a", "b"], Readout::Label).expect("label");
        assert_eq!(q, prompt());
    }

    #[test]
    fn shared_first_tokens_are_refused_naming_both_items() {
        let items: Vec<&[u32]> = vec![&[70, 71], &[70, 72]];
        let mut p = layout::build(PrefixKind::User, &[1], &items, &[0, 1], &[9], 100);
        let e = apply(&mut p, &items, &["a", "b"], Readout::Item).expect_err("ambiguous");
        let msg = e.to_string();
        assert!(
            msg.contains("\"a\"") && msg.contains("\"b\"") && msg.contains("70"),
            "{msg}"
        );
    }

    #[test]
    fn parses_and_prints() {
        assert_eq!("item".parse::<Readout>(), Ok(Readout::Item));
        assert_eq!(Readout::Label.to_string(), "label");
        assert!("logit".parse::<Readout>().is_err());
        let v: Readout = serde_json::from_str("\"item\"").expect("serde");
        assert_eq!(v, Readout::Item);
    }
}
