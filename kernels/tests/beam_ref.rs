//! CPU reference tests of the constrained beam top-k.

use recache_kernels::beam::{
    BeamChoice, BeamStep, beam_topk_brute_force, beam_topk_reference, candidate_key,
};
use recache_kernels::beam_mirror::beam_topk_threshold_mirror;
use recache_kernels::testing::{Rng, random_beam_nodes, random_items, random_log_probs};
use recache_kernels::trie::Trie;

struct Case {
    trie: Trie,
    lp: Vec<f32>,
    scores: Vec<f32>,
    nodes: Vec<i32>,
    vocab: usize,
}

fn case(seed: u64, bw: usize, items: usize, codebook: u32, depth: usize) -> Case {
    let mut rng = Rng::new(seed);
    let trie = Trie::from_items(&random_items(&mut rng, items, 3, codebook));
    let vocab = 3 * codebook as usize + 5;
    let lp = random_log_probs(&mut rng, bw * vocab);
    let scores = random_log_probs(&mut rng, bw);
    let nodes = random_beam_nodes(&mut rng, &trie, bw, depth);
    Case {
        trie,
        lp,
        scores,
        nodes,
        vocab,
    }
}

fn step(c: &Case, k: usize) -> BeamStep<'_> {
    BeamStep {
        log_probs: &c.lp,
        row_stride: c.vocab,
        vocab: c.vocab,
        beam_scores: &c.scores,
        beam_node: &c.nodes,
        trie: &c.trie,
        per_beam_k: k,
    }
}

#[test]
fn heap_reference_equals_brute_force_and_terminates_early() {
    for (seed, bw, depth) in [(1, 64, 0), (2, 64, 1), (3, 512, 1), (4, 128, 2), (5, 7, 1)] {
        let c = case(seed, bw, 20_000, 256, depth);
        let s = step(&c, bw);
        let r = beam_topk_reference(&s).unwrap();
        assert_eq!(r.choices, beam_topk_brute_force(&s).unwrap(), "seed {seed}");
        if depth == 1 && bw >= 64 {
            assert!(
                r.visited < r.total / 2,
                "visited {} of {}",
                r.visited,
                r.total
            );
        }
    }
}

#[test]
fn gpu_mirror_equals_reference_including_bisection() {
    for (seed, bw, k, cap) in [
        (6, 512, 512, 4096),
        (7, 64, 64, 4096),
        (8, 64, 32, 64),
        (9, 256, 256, 300),
        (10, 3, 8, 4),
    ] {
        let c = case(seed, bw, 30_000, 256, 1);
        let s = step(&c, k);
        let m = beam_topk_threshold_mirror(&s, cap).unwrap();
        assert_eq!(
            m.choices,
            beam_topk_reference(&s).unwrap().choices,
            "seed {seed}"
        );
        if cap < 1000 {
            assert!(m.bisected, "seed {seed} should exercise the bisection");
        }
    }
}

#[test]
fn mask_is_respected_and_nodes_follow_the_trie() {
    let c = case(11, 128, 5_000, 64, 2);
    let r = beam_topk_reference(&step(&c, 128)).unwrap();
    for ch in r.choices.iter().filter(|ch| ch.parent >= 0) {
        let (toks, nodes) = c.trie.children(c.nodes[ch.parent as usize]);
        let i = toks
            .binary_search(&ch.token)
            .expect("token allowed by the trie");
        assert_eq!(ch.node, nodes[i]);
        let lp = c.lp[ch.parent as usize * c.vocab + ch.token as usize];
        assert_eq!(ch.score, c.scores[ch.parent as usize] + lp);
    }
}

#[test]
fn ties_break_by_beam_then_token_and_padding_fills() {
    // Two beams on the root, all log-probs equal: order is (beam, token).
    let trie = Trie::from_items(&[vec![3, 10], vec![1, 11], vec![2, 12]]);
    let lp = vec![-1.0f32; 2 * 16];
    let s = BeamStep {
        log_probs: &lp,
        row_stride: 16,
        vocab: 16,
        beam_scores: &[0.0, 0.0],
        beam_node: &[0, 0],
        trie: &trie,
        per_beam_k: 2,
    };
    let got: Vec<(i32, i32)> = beam_topk_reference(&s)
        .unwrap()
        .choices
        .iter()
        .map(|c| (c.parent, c.token))
        .collect();
    assert_eq!(got, vec![(0, 1), (0, 2)]);
    // Inactive beams and too few candidates pad with NONE.
    let s2 = BeamStep {
        beam_node: &[-1, 3],
        ..s
    };
    let r = beam_topk_reference(&s2).unwrap();
    assert_eq!(r.choices[1], BeamChoice::NONE);
    assert!(candidate_key(f32::NAN, 0, 0, 16) < candidate_key(-1e30, 0, 0, 16));
}

#[test]
fn invalid_inputs_are_errors_not_panics() {
    let c = case(12, 8, 100, 16, 1);
    let mut s = step(&c, 0);
    assert!(beam_topk_reference(&s).is_err());
    s.per_beam_k = 4;
    s.row_stride = c.vocab - 1;
    assert!(beam_topk_reference(&s).is_err());
    let bad = Trie {
        row_ptr: vec![0, 2],
        child_token: vec![5, 1],
        child_node: vec![0, 0],
    };
    let s3 = BeamStep {
        trie: &bad,
        row_stride: c.vocab,
        ..s
    };
    assert!(beam_topk_reference(&s3).is_err());
}
