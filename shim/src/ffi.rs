//! The C ABI (declared in `include/recache_shim.h`). Every fallible function
//! returns a [`RecacheStatus`] code; the message of the last failure on the
//! calling thread is read with [`recache_shim_last_error`]. No panic crosses
//! the boundary ([`crate::status::guard`]). Kernels are enqueued on the
//! caller's `CUstream` and run asynchronously; nothing is copied to the host.

use crate::error::ShimError;
use crate::launch::{self, BeamArgs, LayerPointers, ScatterArgs};
use crate::loader;
use crate::status::{self, guard};
use cudarc::driver::sys::CUstream;
use recache_kernels::KernelError;
use recache_kernels::dtype::KvDtype;
use recache_kernels::rope::{RopeConfig, RopeStyle};
use recache_kernels::scatter::KvShape;
use std::ffi::{c_char, c_void};

/// Version of this C ABI; bumped on any signature change.
pub const RECACHE_SHIM_ABI_VERSION: u32 = 2;

pub(crate) fn nonneg(v: i64, name: &'static str) -> Result<usize, ShimError> {
    usize::try_from(v).map_err(|_| KernelError::invalid(name, format!("{v} is negative")).into())
}

/// The ABI version the library implements.
#[unsafe(no_mangle)]
pub extern "C" fn recache_shim_abi_version() -> u32 {
    RECACHE_SHIM_ABI_VERSION
}

/// Copy this thread's last error message into `buf` (NUL-terminated,
/// truncated to `buf_len - 1` bytes) and return its full length in bytes.
///
/// # Safety
/// `buf` must be null or valid for writes of `buf_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recache_shim_last_error(buf: *mut c_char, buf_len: usize) -> usize {
    let msg = status::last_error();
    if !buf.is_null() && buf_len > 0 {
        let n = msg.len().min(buf_len - 1);
        // SAFETY: `buf` is valid for `buf_len` bytes and n + 1 <= buf_len.
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    msg.len()
}

/// `RECACHE_OK` if the kernels can run on device `device_ordinal` (driver
/// found, device >= sm_80, modules compiled and loaded: this triggers the
/// first-use compile), else the reason's status code.
#[unsafe(no_mangle)]
pub extern "C" fn recache_shim_kernels_available(device_ordinal: i32) -> i32 {
    guard(|| {
        loader::driver_available()?;
        loader::kernels(nonneg(device_ordinal as i64, "device_ordinal")?).map(|_| ())
    })
}

/// The scatter's shape from its C arguments (negative values named).
pub(crate) fn kv_shape(
    [heads, head_dim, block_size]: [i32; 3],
    [src_slots, dst_slots]: [i64; 2],
    [block, token, head]: [i64; 3],
) -> Result<KvShape, ShimError> {
    Ok(KvShape {
        num_kv_heads: nonneg(heads as i64, "num_kv_heads")?,
        head_dim: nonneg(head_dim as i64, "head_dim")?,
        num_src_slots: nonneg(src_slots, "num_src_slots")?,
        num_dst_slots: nonneg(dst_slots, "num_dst_slots")?,
        block_size: nonneg(block_size as i64, "block_size")?,
        dst_block_stride: nonneg(block, "dst_block_stride")?,
        dst_token_stride: nonneg(token, "dst_token_stride")?,
        dst_head_stride: nonneg(head, "dst_head_stride")?,
    })
}

/// The model's RoPE from its C arguments.
pub(crate) fn rope_config(
    rotary_dim: i32,
    theta: f32,
    style: i32,
) -> Result<RopeConfig, ShimError> {
    Ok(RopeConfig {
        rotary_dim: nonneg(rotary_dim as i64, "rotary_dim")?,
        theta,
        style: RopeStyle::from_code(style).ok_or_else(|| {
            KernelError::invalid("rope_style", format!("{style}: want 0 (NeoX) or 1 (GPT-J)"))
        })?,
    })
}

pub(crate) fn kv_dtype(code: i32) -> Result<KvDtype, ShimError> {
    KvDtype::from_code(code).ok_or_else(|| {
        KernelError::invalid("dtype", format!("{code}: want 0 (fp16) or 1 (bf16)")).into()
    })
}

/// Bytes of device workspace [`recache_beam_topk`] needs (0 for bad sizes).
#[unsafe(no_mangle)]
pub extern "C" fn recache_beam_topk_workspace_bytes(beam_width: i32, per_beam_k: i32) -> usize {
    match (usize::try_from(beam_width), usize::try_from(per_beam_k)) {
        (Ok(b), Ok(k)) => launch::beam_workspace_bytes(b, k),
        _ => 0,
    }
}

/// Scatter item K/V segments into the paged cache, re-rotating K by RoPE from
/// `stored_pos` to each segment's `seg_dst_pos` (layout: kernels/README.md;
/// head `h` of slot `s` at `(s / block_size) * dst_block_stride + (s % block_size)
/// * dst_token_stride + h * dst_head_stride` elements from the layer's K or V base).
/// `dtype`: 0 = fp16, 1 = bf16. `rope_style`: 0 = NeoX, 1 = GPT-J.
///
/// # Safety
/// `src_k_layers`, `src_v_layers`, `dst_k_layers`, `dst_v_layers` are HOST
/// arrays of `num_layers` device addresses (16-byte aligned). The `seg_*`
/// arrays (`num_segments` entries) and `slot_mapping` (`num_tokens` entries)
/// are DEVICE arrays. All device memory must belong to the primary context of
/// `device_ordinal`, be sized as described, and stay alive until the work on
/// `stream` (a `CUstream` of that context, or null) completes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recache_item_kv_scatter(
    device_ordinal: i32,
    stream: *mut c_void,
    dtype: i32,
    num_layers: i32,
    src_k_layers: *const u64,
    src_v_layers: *const u64,
    dst_k_layers: *const u64,
    dst_v_layers: *const u64,
    num_kv_heads: i32,
    head_dim: i32,
    num_src_slots: i64,
    num_dst_slots: i64,
    block_size: i32,
    dst_block_stride: i64,
    dst_token_stride: i64,
    dst_head_stride: i64,
    num_segments: i32,
    seg_src_slot: *const i64,
    seg_len: *const i32,
    seg_tok_offset: *const i32,
    seg_dst_pos: *const i32,
    slot_mapping: *const i64,
    num_tokens: i64,
    stored_pos: i32,
    rotary_dim: i32,
    rope_theta: f32,
    rope_style: i32,
) -> i32 {
    guard(|| {
        let n = nonneg(num_layers as i64, "num_layers")?;
        let tables = [
            (src_k_layers, "src_k_layers"),
            (src_v_layers, "src_v_layers"),
            (dst_k_layers, "dst_k_layers"),
            (dst_v_layers, "dst_v_layers"),
        ];
        let mut slices: Vec<&[u64]> = Vec::with_capacity(4);
        for (p, name) in tables {
            if p.is_null() {
                return Err(ShimError::Null(name));
            }
            // SAFETY: non-null host array of `num_layers` entries per the contract.
            slices.push(unsafe { std::slice::from_raw_parts(p, n) });
        }
        let layers: Vec<LayerPointers> = (0..n)
            .map(|i| LayerPointers {
                src_k: slices[0][i],
                src_v: slices[1][i],
                dst_k: slices[2][i],
                dst_v: slices[3][i],
            })
            .collect();
        let args = ScatterArgs {
            dtype: kv_dtype(dtype)?,
            layers: &layers,
            shape: kv_shape(
                [num_kv_heads, head_dim, block_size],
                [num_src_slots, num_dst_slots],
                [dst_block_stride, dst_token_stride, dst_head_stride],
            )?,
            rope: rope_config(rotary_dim, rope_theta, rope_style)?,
            stored_pos,
            num_segments: nonneg(num_segments as i64, "num_segments")?,
            seg_src_slot: seg_src_slot as u64,
            seg_len: seg_len as u64,
            seg_tok_offset: seg_tok_offset as u64,
            seg_dst_pos: seg_dst_pos as u64,
            slot_mapping: slot_mapping as u64,
            num_tokens: nonneg(num_tokens, "num_tokens")?,
        };
        let ordinal = nonneg(device_ordinal as i64, "device_ordinal")?;
        // SAFETY: forwarded caller contract.
        unsafe { launch::item_kv_scatter(ordinal, stream as CUstream, &args) }
    })
}

/// One constrained beam-search step: global best `beam_width` of
/// `beam_scores[b] + log_probs[b, t]` over tokens `t` allowed by the CSR trie
/// at `beam_node[b]`, at most `per_beam_k` per beam. Outputs (`beam_width`
/// entries each, best first, ties by (beam, token)): parent beam, token,
/// score, next trie node; padding is (-1, -1, -inf, -1). `out_visited`
/// (nullable) receives the number of candidates the selection examined.
///
/// # Safety
/// All pointers except `out_visited` must be non-null DEVICE pointers of the
/// primary context of `device_ordinal`: `log_probs` f32 `[beam_width,
/// row_stride]`, `beam_scores` f32 and `beam_node` i32 `[beam_width]`,
/// `trie_row_ptr` i32 `[num_nodes + 1]`, `trie_child_token`/`trie_child_node`
/// i32 `[nnz]` (tokens ascending within a row, < vocab_size), `workspace` of
/// `workspace_bytes` >= `recache_beam_topk_workspace_bytes`, outputs
/// `[beam_width]`. Memory must outlive the work on `stream`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recache_beam_topk(
    device_ordinal: i32,
    stream: *mut c_void,
    log_probs: *const f32,
    beam_width: i32,
    vocab_size: i32,
    row_stride: i64,
    beam_scores: *const f32,
    beam_node: *const i32,
    trie_row_ptr: *const i32,
    trie_child_token: *const i32,
    trie_child_node: *const i32,
    num_nodes: i32,
    per_beam_k: i32,
    workspace: *mut c_void,
    workspace_bytes: usize,
    out_parent: *mut i32,
    out_token: *mut i32,
    out_score: *mut f32,
    out_node: *mut i32,
    out_visited: *mut u32,
) -> i32 {
    guard(|| {
        let args = BeamArgs {
            log_probs: log_probs as u64,
            beam_width: nonneg(beam_width as i64, "beam_width")?,
            vocab: nonneg(vocab_size as i64, "vocab_size")?,
            row_stride: nonneg(row_stride, "row_stride")?,
            beam_scores: beam_scores as u64,
            beam_node: beam_node as u64,
            trie_row_ptr: trie_row_ptr as u64,
            trie_child_token: trie_child_token as u64,
            trie_child_node: trie_child_node as u64,
            num_nodes: nonneg(num_nodes as i64, "num_nodes")?,
            per_beam_k: nonneg(per_beam_k as i64, "per_beam_k")?,
            workspace: workspace as u64,
            workspace_bytes,
            out_parent: out_parent as u64,
            out_token: out_token as u64,
            out_score: out_score as u64,
            out_node: out_node as u64,
            out_visited: out_visited as u64,
        };
        let ordinal = nonneg(device_ordinal as i64, "device_ordinal")?;
        // SAFETY: forwarded caller contract.
        unsafe { launch::beam_topk(ordinal, stream as CUstream, &args) }
    })
}
