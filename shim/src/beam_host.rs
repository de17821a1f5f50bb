//! One constrained beam top-k step on the GPU from host data: the caller (recache's
//! generative retrieval, which holds each step's log-probs on the host) hands a
//! [`BeamStep`]; this uploads it, launches the kernel on a stream of its own, waits and
//! returns the choices in the CPU reference's shape, so the two are interchangeable.

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DeviceRepr};
use recache_kernels::beam::{BeamChoice, BeamStep};
use std::sync::Arc;

use crate::error::ShimError;
use crate::launch::{self, BeamArgs};
use crate::loader;

fn up<T: DeviceRepr>(s: &Arc<CudaStream>, v: &[T]) -> Result<CudaSlice<T>, ShimError> {
    s.clone_htod(v).map_err(ShimError::driver("beam upload"))
}

fn zeros<T: DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    s: &Arc<CudaStream>,
    n: usize,
) -> Result<CudaSlice<T>, ShimError> {
    s.alloc_zeros::<T>(n.max(1))
        .map_err(ShimError::driver("beam alloc"))
}

fn ptr<T>(s: &Arc<CudaStream>, d: &CudaSlice<T>) -> u64 {
    let (p, _sync) = d.device_ptr(s);
    p
}

/// Runs `step` on device `ordinal` (kernels loaded, and compiled, on first use).
pub fn beam_topk_device(ordinal: usize, step: &BeamStep<'_>) -> Result<Vec<BeamChoice>, ShimError> {
    step.validate()?;
    let k = loader::kernels(ordinal)?;
    let s = k
        .ctx
        .new_stream()
        .map_err(ShimError::driver("beam stream"))?;
    let bw = step.beam_width();
    let (lp, sc, nd) = (
        up(&s, step.log_probs)?,
        up(&s, step.beam_scores)?,
        up(&s, step.beam_node)?,
    );
    let trie = step.trie;
    let (rp, ct, cn) = (
        up(&s, &trie.row_ptr)?,
        up(&s, &trie.child_token)?,
        up(&s, &trie.child_node)?,
    );
    let ws_bytes = launch::beam_workspace_bytes(bw, step.per_beam_k);
    let ws = zeros::<u8>(&s, ws_bytes)?;
    let (op, ot, os, on) = (
        zeros::<i32>(&s, bw)?,
        zeros::<i32>(&s, bw)?,
        zeros::<f32>(&s, bw)?,
        zeros::<i32>(&s, bw)?,
    );
    let args = BeamArgs {
        log_probs: ptr(&s, &lp),
        beam_width: bw,
        vocab: step.vocab,
        row_stride: step.row_stride,
        beam_scores: ptr(&s, &sc),
        beam_node: ptr(&s, &nd),
        trie_row_ptr: ptr(&s, &rp),
        trie_child_token: ptr(&s, &ct),
        trie_child_node: ptr(&s, &cn),
        num_nodes: trie.num_nodes(),
        per_beam_k: step.per_beam_k,
        workspace: ptr(&s, &ws),
        workspace_bytes: ws_bytes,
        out_parent: ptr(&s, &op),
        out_token: ptr(&s, &ot),
        out_score: ptr(&s, &os),
        out_node: ptr(&s, &on),
        out_visited: 0,
    };
    // SAFETY: every pointer is a live allocation of this context sized as BeamArgs states,
    // and the stream is this context's; the allocations outlive the synchronize below.
    unsafe { launch::beam_topk(ordinal, s.cu_stream(), &args) }?;
    let get = |e| ShimError::Driver {
        what: "beam download",
        source: e,
    };
    let (p, t, sco, n) = (
        s.clone_dtoh(&op).map_err(get)?,
        s.clone_dtoh(&ot).map_err(get)?,
        s.clone_dtoh(&os).map_err(get)?,
        s.clone_dtoh(&on).map_err(get)?,
    );
    s.synchronize().map_err(ShimError::driver("beam sync"))?;
    Ok((0..bw)
        .map(|i| BeamChoice {
            parent: p[i],
            token: t[i],
            score: sco[i],
            node: n[i],
        })
        .collect())
}
