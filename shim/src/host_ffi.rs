//! The scatter's CPU reference behind the same C arguments as the kernel, on HOST memory.
//!
//! The item-pool connector computes layer pointers, strides, segments and slots for vLLM's
//! GPU caches; this entry point lets that very arithmetic run on CPU tensors shaped like
//! those caches (in CI, with no GPU) and be checked against the kernel's oracle
//! (`recache_kernels::scatter::scatter_layer_reference`). It is a test and fallback path,
//! not a fast one.

use crate::error::ShimError;
use crate::ffi::{kv_dtype, kv_shape, nonneg, rope_config};
use crate::status::guard;
use recache_kernels::KernelError;
use recache_kernels::scatter::{LayerBuffers, Segment, scatter_layer_reference};

/// Host twin of [`crate::ffi::recache_item_kv_scatter`]: the same arguments minus device
/// and stream, every pointer a HOST address (layer tables included). Runs synchronously.
///
/// # Safety
/// Layer `i`'s `src_k_layers[i]`/`src_v_layers[i]` must be valid for reads of
/// `num_src_slots * num_kv_heads * head_dim` u16s, `dst_k_layers[i]`/`dst_v_layers[i]`
/// for reads and writes of the strided span the shape describes, the segment arrays for
/// `num_segments` entries and `slot_mapping` for `num_tokens`; pool and cache must not
/// overlap, and nothing else may touch them during the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recache_item_kv_scatter_host(
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
        let dtype = kv_dtype(dtype)?;
        let shape = kv_shape(
            [num_kv_heads, head_dim, block_size],
            [num_src_slots, num_dst_slots],
            [dst_block_stride, dst_token_stride, dst_head_stride],
        )?;
        shape.validate()?;
        let rope = rope_config(rotary_dim, rope_theta, rope_style)?;
        let layers = nonneg(num_layers as i64, "num_layers")?;
        let nseg = nonneg(num_segments as i64, "num_segments")?;
        let ntok = nonneg(num_tokens, "num_tokens")?;
        // SAFETY (all slices below): non-null arrays of the stated lengths per the contract.
        let table = |p: *const u64, name: &'static str| -> Result<&[u64], ShimError> {
            if p.is_null() {
                return Err(ShimError::Null(name));
            }
            Ok(unsafe { std::slice::from_raw_parts(p, layers) })
        };
        let (sk, sv) = (
            table(src_k_layers, "src_k_layers")?,
            table(src_v_layers, "src_v_layers")?,
        );
        let (dk, dv) = (
            table(dst_k_layers, "dst_k_layers")?,
            table(dst_v_layers, "dst_v_layers")?,
        );
        let segs: Vec<Segment> = if nseg == 0 {
            Vec::new()
        } else {
            for (p, n) in [
                (seg_src_slot as usize, "seg_src_slot"),
                (seg_len as usize, "seg_len"),
                (seg_tok_offset as usize, "seg_tok_offset"),
                (seg_dst_pos as usize, "seg_dst_pos"),
            ] {
                if p == 0 {
                    return Err(ShimError::Null(n));
                }
            }
            let (a, b, c, d) = unsafe {
                (
                    std::slice::from_raw_parts(seg_src_slot, nseg),
                    std::slice::from_raw_parts(seg_len, nseg),
                    std::slice::from_raw_parts(seg_tok_offset, nseg),
                    std::slice::from_raw_parts(seg_dst_pos, nseg),
                )
            };
            (0..nseg)
                .map(|i| Segment {
                    src_slot: a[i],
                    len: b[i],
                    tok_offset: c[i],
                    dst_pos: d[i],
                })
                .collect()
        };
        let slots: &[i64] = if ntok == 0 {
            &[]
        } else if slot_mapping.is_null() {
            return Err(ShimError::Null("slot_mapping"));
        } else {
            unsafe { std::slice::from_raw_parts(slot_mapping, ntok) }
        };
        let src_len = shape.num_src_slots * shape.row();
        for i in 0..layers {
            for (p, name) in [
                (sk[i], "src_k"),
                (sv[i], "src_v"),
                (dk[i], "dst_k"),
                (dv[i], "dst_v"),
            ] {
                if p == 0 || p % 16 != 0 {
                    return Err(KernelError::invalid(
                        "layer pointers",
                        format!("layer {i} {name}: null or not 16-byte aligned"),
                    )
                    .into());
                }
            }
            // K and V may interleave in one allocation (vLLM's [.., 2*D] content): one
            // mutable slice from the lower base covers both planes.
            let lo = dk[i].min(dv[i]);
            let hi = dk[i].max(dv[i]) + 2 * shape.dst_span() as u64;
            let dst_len = ((hi - lo) / 2) as usize;
            for s in [sk[i], sv[i]] {
                let s_end = s + 2 * src_len as u64;
                if s < hi && lo < s_end {
                    return Err(KernelError::invalid(
                        "layer pointers",
                        format!("layer {i}: the pool overlaps the cache"),
                    )
                    .into());
                }
            }
            let bufs = unsafe {
                LayerBuffers {
                    src_k: std::slice::from_raw_parts(sk[i] as *const u16, src_len),
                    src_v: std::slice::from_raw_parts(sv[i] as *const u16, src_len),
                    dst: std::slice::from_raw_parts_mut(lo as *mut u16, dst_len),
                    dst_k_base: ((dk[i] - lo) / 2) as usize,
                    dst_v_base: ((dv[i] - lo) / 2) as usize,
                }
            };
            scatter_layer_reference(dtype, &shape, &rope, stored_pos, &segs, slots, bufs)?;
        }
        Ok(())
    })
}
