//! Validating arguments and launching the kernels on a caller's stream.
//!
//! Everything here takes raw device pointers (`u64`) and a borrowed
//! `CUstream`: the engine owns memory and ordering; the shim neither
//! allocates nor copies. Host-visible parameters (shapes, layer pointers) are
//! validated; device-resident index arrays are bounds-checked in the kernels.

use crate::error::ShimError;
use crate::loader;
use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg, sys::CUstream};
use recache_kernels::KernelError;
use recache_kernels::beam::{MAX_BEAM_WIDTH, MAX_PER_BEAM_K};
use recache_kernels::dtype::KvDtype;
use recache_kernels::rope::{MAX_ROTARY_DIM, RopeConfig};
use recache_kernels::scatter::KvShape;
use recache_kernels::sources::{
    CANDIDATE_THREADS, SCATTER_MAX_LAYERS, SCATTER_THREADS, SELECT_THREADS,
};

/// Mirrors `LayerPtrs` in `item_kv_scatter.cu`.
#[repr(C)]
#[derive(Clone, Copy)]
struct LayerPtrs {
    src_k: [u64; SCATTER_MAX_LAYERS],
    src_v: [u64; SCATTER_MAX_LAYERS],
    dst_k: [u64; SCATTER_MAX_LAYERS],
    dst_v: [u64; SCATTER_MAX_LAYERS],
}
// SAFETY: plain-old-data with the C layout the kernel declares.
unsafe impl DeviceRepr for LayerPtrs {}

/// Mirrors `ScatterShape` in `item_kv_scatter.cu`.
#[repr(C)]
#[derive(Clone, Copy)]
struct ScatterShape {
    num_heads: i32,
    head_dim: i32,
    rotary_dim: i32,
    block_size: i32,
    dst_block_stride: i64,
    dst_token_stride: i64,
    dst_head_stride: i64,
    num_src_slots: i64,
    num_dst_slots: i64,
    num_tokens: i64,
    stored_pos: i32,
}
// SAFETY: as above.
unsafe impl DeviceRepr for ScatterShape {}

/// Mirrors `RopeTable` in `item_kv_scatter.cu`.
#[repr(C)]
#[derive(Clone, Copy)]
struct RopeTable([f32; MAX_ROTARY_DIM / 2]);
// SAFETY: as above.
unsafe impl DeviceRepr for RopeTable {}

/// Per-layer base pointers of one layer (device addresses).
#[derive(Clone, Copy, Debug)]
pub struct LayerPointers {
    /// Item pool K, `[num_src_slots, H, D]`.
    pub src_k: u64,
    /// Item pool V.
    pub src_v: u64,
    /// Engine cache K, paged.
    pub dst_k: u64,
    /// Engine cache V, paged.
    pub dst_v: u64,
}

/// Arguments of one scatter call (device pointers as `u64`).
pub struct ScatterArgs<'a> {
    /// Storage dtype of pool and cache.
    pub dtype: KvDtype,
    /// One entry per layer.
    pub layers: &'a [LayerPointers],
    /// Shapes shared by all layers.
    pub shape: KvShape,
    /// RoPE of the model.
    pub rope: RopeConfig,
    /// Position every item's first token was computed at.
    pub stored_pos: i32,
    /// Number of segments.
    pub num_segments: usize,
    /// `i64[num_segments]` pool slot of each item's first token.
    pub seg_src_slot: u64,
    /// `i32[num_segments]` tokens per item.
    pub seg_len: u64,
    /// `i32[num_segments]` offset of each item in `slot_mapping`.
    pub seg_tok_offset: u64,
    /// `i32[num_segments]` target position of each item's first token.
    pub seg_dst_pos: u64,
    /// `i64[num_tokens]` destination slot per token (-1 = skip).
    pub slot_mapping: u64,
    /// Length of `slot_mapping`.
    pub num_tokens: usize,
}

fn check(cond: bool, name: &'static str, reason: impl Into<String>) -> Result<(), ShimError> {
    if cond {
        Ok(())
    } else {
        Err(KernelError::invalid(name, reason).into())
    }
}

/// Launch the scatter on `stream` (asynchronous; errors are launch errors).
///
/// # Safety
/// Every pointer must be a device address valid for the stated shapes in the
/// device's primary context, `stream` a live stream of that context (or null
/// for the legacy default stream), and nothing else may write the destination
/// slots concurrently.
pub unsafe fn item_kv_scatter(
    ordinal: usize,
    stream: CUstream,
    a: &ScatterArgs<'_>,
) -> Result<(), ShimError> {
    a.shape.validate()?;
    a.rope.validate(a.shape.head_dim)?;
    check(!a.layers.is_empty(), "num_layers", "must be > 0")?;
    check(
        a.num_segments <= 65_535,
        "num_segments",
        "at most 65535 per call (grid.x)",
    )?;
    for (i, l) in a.layers.iter().enumerate() {
        for p in [l.src_k, l.src_v, l.dst_k, l.dst_v] {
            check(
                p != 0 && p % 16 == 0,
                "layer pointers",
                format!("layer {i}: null or not 16-byte aligned"),
            )?;
        }
    }
    for (p, n) in [
        (a.seg_src_slot, "seg_src_slot"),
        (a.seg_len, "seg_len"),
        (a.seg_tok_offset, "seg_tok_offset"),
        (a.seg_dst_pos, "seg_dst_pos"),
        (a.slot_mapping, "slot_mapping"),
    ] {
        check(p != 0 || a.num_segments == 0, n, "null")?;
    }
    if a.num_segments == 0 {
        return Ok(());
    }
    let k = loader::kernels(ordinal)?;
    // SAFETY: the caller guarantees `stream` belongs to this context and outlives the call.
    let s = unsafe { k.ctx.wrap_borrowed_stream(stream) };
    let func = &k.scatter[a.dtype as usize * 2 + a.rope.style as usize];
    let shape = ScatterShape {
        num_heads: a.shape.num_kv_heads as i32,
        head_dim: a.shape.head_dim as i32,
        rotary_dim: a.rope.rotary_dim as i32,
        block_size: a.shape.block_size as i32,
        dst_block_stride: a.shape.dst_block_stride as i64,
        dst_token_stride: a.shape.dst_token_stride as i64,
        dst_head_stride: a.shape.dst_head_stride as i64,
        num_src_slots: a.shape.num_src_slots as i64,
        num_dst_slots: a.shape.num_dst_slots as i64,
        num_tokens: a.num_tokens as i64,
        stored_pos: a.stored_pos,
    };
    let rope = RopeTable(a.rope.inv_freq_table());
    for chunk in a.layers.chunks(SCATTER_MAX_LAYERS) {
        let mut ptrs = LayerPtrs {
            src_k: [0; SCATTER_MAX_LAYERS],
            src_v: [0; SCATTER_MAX_LAYERS],
            dst_k: [0; SCATTER_MAX_LAYERS],
            dst_v: [0; SCATTER_MAX_LAYERS],
        };
        for (i, l) in chunk.iter().enumerate() {
            (ptrs.src_k[i], ptrs.src_v[i], ptrs.dst_k[i], ptrs.dst_v[i]) =
                (l.src_k, l.src_v, l.dst_k, l.dst_v);
        }
        let cfg = LaunchConfig {
            grid_dim: (a.num_segments as u32, chunk.len() as u32, 1),
            block_dim: (SCATTER_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = s.launch_builder(func);
        b.arg(&ptrs).arg(&shape).arg(&rope);
        b.arg(&a.seg_src_slot)
            .arg(&a.seg_len)
            .arg(&a.seg_tok_offset)
            .arg(&a.seg_dst_pos)
            .arg(&a.slot_mapping);
        // SAFETY: argument order and types match the kernel signature; pointer validity is the caller's contract.
        unsafe { b.launch(cfg) }.map_err(ShimError::driver("scatter launch"))?;
    }
    Ok(())
}

/// Arguments of one constrained beam top-k step (device pointers as `u64`).
pub struct BeamArgs {
    /// `f32[beam_width, row_stride]` log-probs.
    pub log_probs: u64,
    /// Beams (= outputs).
    pub beam_width: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Elements between beam rows.
    pub row_stride: usize,
    /// `f32[beam_width]`.
    pub beam_scores: u64,
    /// `i32[beam_width]` trie node per beam (< 0 = inactive).
    pub beam_node: u64,
    /// `i32[num_nodes + 1]`.
    pub trie_row_ptr: u64,
    /// `i32[nnz]`, ascending per row.
    pub trie_child_token: u64,
    /// `i32[nnz]`.
    pub trie_child_node: u64,
    /// Trie nodes.
    pub num_nodes: usize,
    /// Candidates kept per beam.
    pub per_beam_k: usize,
    /// Scratch of at least [`beam_workspace_bytes`].
    pub workspace: u64,
    /// Its size.
    pub workspace_bytes: usize,
    /// Outputs, `[beam_width]` each; `out_visited` may be 0.
    pub out_parent: u64,
    /// Token per output.
    pub out_token: u64,
    /// Score per output.
    pub out_score: u64,
    /// Trie node per output.
    pub out_node: u64,
    /// `u32` count of candidates examined, optional.
    pub out_visited: u64,
}

/// Workspace the beam top-k needs: the `[beam_width, per_beam_k]` key lists.
pub fn beam_workspace_bytes(beam_width: usize, per_beam_k: usize) -> usize {
    beam_width * per_beam_k * 8
}

/// Launch one beam top-k step on `stream`.
///
/// # Safety
/// As for [`item_kv_scatter`]: valid device pointers of the stated sizes in
/// the device's primary context and a live `stream` of that context.
pub unsafe fn beam_topk(ordinal: usize, stream: CUstream, a: &BeamArgs) -> Result<(), ShimError> {
    check(
        (1..=MAX_BEAM_WIDTH).contains(&a.beam_width),
        "beam_width",
        format!("{} not in 1..={MAX_BEAM_WIDTH}", a.beam_width),
    )?;
    check(
        (1..=MAX_PER_BEAM_K).contains(&a.per_beam_k),
        "per_beam_k",
        format!("{} not in 1..={MAX_PER_BEAM_K}", a.per_beam_k),
    )?;
    check(
        a.vocab > 0 && a.row_stride >= a.vocab,
        "vocab_size",
        "need 0 < vocab <= row_stride",
    )?;
    check(
        (a.beam_width as u64) * (a.vocab as u64) < u32::MAX as u64,
        "vocab_size",
        "beam_width * vocab must be < 2^32",
    )?;
    check(
        a.num_nodes > 0 && a.num_nodes < i32::MAX as usize,
        "num_nodes",
        "must be in 1..2^31-1",
    )?;
    check(
        a.workspace_bytes >= beam_workspace_bytes(a.beam_width, a.per_beam_k),
        "workspace_bytes",
        "too small; see recache_beam_topk_workspace_bytes",
    )?;
    for (p, n) in [
        (a.log_probs, "log_probs"),
        (a.beam_scores, "beam_scores"),
        (a.beam_node, "beam_node"),
        (a.trie_row_ptr, "trie_row_ptr"),
        (a.trie_child_token, "trie_child_token"),
        (a.trie_child_node, "trie_child_node"),
        (a.workspace, "workspace"),
        (a.out_parent, "out_parent"),
        (a.out_token, "out_token"),
        (a.out_score, "out_score"),
        (a.out_node, "out_node"),
    ] {
        check(p != 0, n, "null")?;
    }
    let k = loader::kernels(ordinal)?;
    // SAFETY: the caller guarantees `stream` belongs to this context and outlives the call.
    let s = unsafe { k.ctx.wrap_borrowed_stream(stream) };
    let (bw, vocab, kk, nodes) = (
        a.beam_width as i32,
        a.vocab as i32,
        a.per_beam_k as i32,
        a.num_nodes as i32,
    );
    let stride = a.row_stride as i64;
    let cfg1 = LaunchConfig {
        grid_dim: (a.beam_width as u32, 1, 1),
        block_dim: (CANDIDATE_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b1 = s.launch_builder(&k.beam_candidates);
    b1.arg(&a.log_probs)
        .arg(&stride)
        .arg(&vocab)
        .arg(&a.beam_scores)
        .arg(&a.beam_node);
    b1.arg(&a.trie_row_ptr)
        .arg(&a.trie_child_token)
        .arg(&nodes)
        .arg(&kk)
        .arg(&a.workspace);
    // SAFETY: matches `recache_beam_candidates`' signature.
    unsafe { b1.launch(cfg1) }.map_err(ShimError::driver("beam candidates launch"))?;
    let cfg2 = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (SELECT_THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b2 = s.launch_builder(&k.beam_select);
    b2.arg(&a.workspace)
        .arg(&bw)
        .arg(&kk)
        .arg(&vocab)
        .arg(&a.beam_node)
        .arg(&a.trie_row_ptr);
    b2.arg(&a.trie_child_token)
        .arg(&a.trie_child_node)
        .arg(&nodes);
    b2.arg(&a.out_parent)
        .arg(&a.out_token)
        .arg(&a.out_score)
        .arg(&a.out_node)
        .arg(&a.out_visited);
    // SAFETY: matches `recache_beam_select`' signature.
    unsafe { b2.launch(cfg2) }.map_err(ShimError::driver("beam select launch"))?;
    Ok(())
}
