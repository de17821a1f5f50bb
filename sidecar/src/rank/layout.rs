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
/// gives a pooled item the same label wherever it sits (`rank::pool`).
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
mod tests {
    use super::*;

    const U: &[u32] = &[1, 2, 3];
    const A: &[u32] = &[10, 11];
    const B: &[u32] = &[20];
    const INSTR: &[u32] = &[9];

    #[test]
    fn user_prefix_layout() {
        let p = build(PrefixKind::User, U, &[A, B], &[0, 1], INSTR, 100);
        assert_eq!(p.tokens, vec![1, 2, 3, 100, 10, 11, 101, 20, 9]);
        assert_eq!(p.labels, vec![(100, 0), (101, 1)]);
    }

    #[test]
    fn item_prefix_layout_follows_the_given_order() {
        let p = build(PrefixKind::Item, U, &[A, B], &[1, 0], INSTR, 100);
        assert_eq!(p.tokens, vec![100, 20, 101, 10, 11, 1, 2, 3, 9]);
        assert_eq!(p.labels, vec![(100, 1), (101, 0)]);
        assert_eq!(item_tokens(&[A, B]), 5);
    }

    #[test]
    fn given_labels_follow_prompt_positions() {
        // The item pool's case: a pooled item keeps its own label wherever it sits.
        let p = build_labeled(PrefixKind::Item, U, &[A, B], &[1, 0], INSTR, &[500, 101]);
        assert_eq!(p.tokens, vec![500, 20, 101, 10, 11, 1, 2, 3, 9]);
        assert_eq!(p.labels, vec![(500, 1), (101, 0)]);
    }

    #[test]
    fn own_labels_override_positional_ones() {
        assert_eq!(labels(100, &[None, Some(500), None]), vec![100, 500, 102]);
    }

    #[test]
    fn same_leading_items_share_a_token_prefix() {
        let c: &[u32] = &[30, 31];
        let p1 = build(PrefixKind::Item, U, &[A, B], &[0, 1], INSTR, 100);
        let p2 = build(PrefixKind::Item, &[7], &[A, c], &[0, 1], INSTR, 100);
        assert_eq!(p1.tokens[..4], p2.tokens[..4]);
        assert_ne!(p1.tokens[4], p2.tokens[4]);
    }
}
