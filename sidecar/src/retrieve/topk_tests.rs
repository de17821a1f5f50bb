//! Unit tests of `retrieve::topk`.

use super::*;
use recache_kernels::trie::Trie;

#[test]
fn without_a_gpu_the_reference_answers() {
    let trie = Trie::from_items(&[vec![0, 1], vec![0, 2], vec![1, 0]]);
    let lp = [-0.1f32, -2.0, -3.0];
    let step = BeamStep {
        log_probs: &lp,
        row_stride: 3,
        vocab: 3,
        beam_scores: &[0.0],
        beam_node: &[0],
        trie: &trie,
        per_beam_k: 1,
    };
    let want = beam_topk_reference(&step).unwrap().choices;
    assert_eq!(select(&step), Some(want));
    if recache_shim::loader::driver_available().is_err() {
        assert_eq!(device(), BeamDevice::Cpu);
    }
}
