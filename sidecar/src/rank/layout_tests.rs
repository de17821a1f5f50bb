//! Unit tests of `rank::layout`.

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
