//! The rewriter: token-id prompts for user-as-prefix and item-as-prefix layouts.
//!
//! Candidate k of the prompt (in prompt order) is introduced by its label token `base + k`; the
//! model's log-probability of that token at the last (discriminant) position is k's score.
//! Labels follow prompt positions, not items, so two IP prompts with the same leading items in
//! the same order have identical leading tokens.
//!
//! - UP: `[U] [L_0 I_a] [L_1 I_b] ... [instr]`, items in request order.
//! - IP: `[L_0 I_x] [L_1 I_y] ... [U] [instr]`, items in the caller's canonical (hot-first) order.

use super::select::PrefixKind;

/// A rewritten prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub tokens: Vec<u32>,
    /// Label token of each prompt position k, with the request index of the item there.
    pub labels: Vec<(u32, usize)>,
}

/// Builds the prompt. `order` lists request indices of `items` in prompt order (a permutation).
pub fn build(
    kind: PrefixKind,
    user: &[u32],
    items: &[&[u32]],
    order: &[usize],
    instruction: &[u32],
    label_base: u32,
) -> Prompt {
    let labels: Vec<u32> = (0..order.len()).map(|k| label_base + k as u32).collect();
    build_labeled(kind, user, items, order, instruction, &labels)
}

/// [`build`] with the label of each prompt position given (distinct ids): the item KV pool
/// gives a pooled item the same label wherever it sits (`itempool`).
pub fn build_labeled(
    kind: PrefixKind,
    user: &[u32],
    items: &[&[u32]],
    order: &[usize],
    instruction: &[u32],
    labels_at: &[u32],
) -> Prompt {
    let item_len: usize = items.iter().map(|t| t.len() + 1).sum();
    let mut tokens = Vec::with_capacity(user.len() + item_len + instruction.len());
    let mut labels = Vec::with_capacity(order.len());
    if kind == PrefixKind::User {
        tokens.extend_from_slice(user);
    }
    for (&i, &label) in order.iter().zip(labels_at) {
        labels.push((label, i));
        tokens.push(label);
        tokens.extend_from_slice(items[i]);
    }
    if kind == PrefixKind::Item {
        tokens.extend_from_slice(user);
    }
    tokens.extend_from_slice(instruction);
    Prompt { tokens, labels }
}

/// The label of each prompt position: an item's own label where it has one (a pooled item
/// keeps its pool slot's label wherever it sits), else the positional `base + k`.
pub fn labels(base: u32, own: &[Option<u32>]) -> Vec<u32> {
    own.iter()
        .enumerate()
        .map(|(k, o)| o.unwrap_or(base + k as u32))
        .collect()
}

/// τ_i: tokens the items occupy in a prompt (one label each).
pub fn item_tokens(items: &[&[u32]]) -> usize {
    items.iter().map(|t| t.len() + 1).sum()
}

#[cfg(test)]
#[path = "layout_tests.rs"]
mod tests;
