//! Host mirror of the GPU selection in `cuda/beam_topk.cu`
//! (`recache_beam_select`), kept step-for-step identical so that its logic,
//! including the rarely taken bisection fallback, is tested without a GPU.
//!
//! The GPU cannot run a sequential min-heap, so it parallelises the same
//! early termination: a lower bound on the final threshold comes from the
//! best `m` candidates of every beam (the BW-th best of that sample), then
//! each beam keeps only its prefix at or above the bound (a binary search in
//! its sorted list = "stop at the first candidate that cannot enter"), and the
//! survivors are sorted. If more than `cap` survive, the bound is raised by
//! bisection on the key until between `beam_width` and `cap` survive.

use crate::beam::{BeamChoice, BeamStep};
use crate::error::Result;

/// Output of the mirror: choices plus the candidates the GPU would examine.
pub struct MirrorResult {
    /// Selected beams, best first.
    pub choices: Vec<BeamChoice>,
    /// Sum over beams of the surviving prefix plus its stopping candidate.
    pub visited: usize,
    /// Whether the bisection fallback ran.
    pub bisected: bool,
}

fn count_at_least(lists: &[Vec<u64>], t: u64) -> usize {
    lists.iter().map(|l| l.partition_point(|&x| x >= t)).sum()
}

/// Run the GPU algorithm on the host with selection buffer size `cap`
/// (the kernel uses [`crate::beam::SELECT_CAP`]).
pub fn beam_topk_threshold_mirror(step: &BeamStep<'_>, cap: usize) -> Result<MirrorResult> {
    step.validate()?;
    let bw = step.beam_width();
    if cap < bw {
        // The bisection needs a non-empty window [bw, cap] to terminate.
        return Err(crate::KernelError::invalid(
            "cap",
            format!("{cap} < beam_width {bw}"),
        ));
    }
    let k = step.per_beam_k;
    // Phase 1 output: per-beam sorted lists, zero-padded to k like the workspace.
    let lists: Vec<Vec<u64>> = (0..bw)
        .map(|b| {
            let mut l = step.beam_candidates(b);
            l.resize(k, 0);
            l
        })
        .collect();
    let m = (cap / bw).clamp(1, k);
    let mut sample: Vec<u64> = lists.iter().flat_map(|l| l[..m].iter().copied()).collect();
    sample.sort_unstable_by(|a, b| b.cmp(a));
    let mut thresh = sample[bw - 1].max(1);
    let mut bisected = false;
    if count_at_least(&lists, thresh) > cap {
        bisected = true;
        let (mut lo, mut hi) = (thresh, sample[0] + 1);
        loop {
            let mid = lo + (hi - lo) / 2;
            let c = count_at_least(&lists, mid);
            if c > cap {
                lo = mid;
            } else if c < bw {
                hi = mid;
            } else {
                thresh = mid;
                break;
            }
        }
    }
    let mut visited = 0;
    let mut kept = Vec::new();
    for l in &lists {
        let c = l.partition_point(|&x| x >= thresh);
        let valid = l.partition_point(|&x| x > 0);
        visited += (c + 1).min(valid);
        kept.extend_from_slice(&l[..c]);
    }
    kept.sort_unstable_by(|a, b| b.cmp(a));
    kept.resize(bw, 0);
    let choices = kept.into_iter().map(|key| step.decode(key)).collect();
    Ok(MirrorResult {
        choices,
        visited,
        bisected,
    })
}
