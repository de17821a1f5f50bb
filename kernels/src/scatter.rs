//! Item-KV scatter with RoPE re-rotation: descriptors, validation and the CPU
//! reference.
//!
//! Layout conventions (shared with `cuda/item_kv_scatter.cu`):
//! - Item pool, per layer, K and V separately: `[num_src_slots, H, D]`
//!   contiguous. Item tokens occupy consecutive slots; every item's first token
//!   was computed at position `stored_pos`.
//! - Engine cache, per layer: any paged layout whose head vector (`D` elements)
//!   is contiguous, described by three element strides from a K (or V) base:
//!   element `(slot, head, e)` sits at `(slot / block_size) * dst_block_stride +
//!   (slot % block_size) * dst_token_stride + head * dst_head_stride + e`.
//!   vLLM 0.32's GPU caches are one `[blocks, heads, tokens, 2*D]` view per
//!   layer in one of its `KVCacheLayout` stride orders, K in the first `D` of
//!   the content and V in the second, so V's base is K's plus `D` and the
//!   strides are the view's own (`recache_shim.gpu_layout` reads them there).
//!   A compact `[num_blocks, block_size, H, D]` plane is the special case
//!   `(block_size*H*D, H*D, D)`.
//! - Segment `s` copies `len[s]` tokens from source slot `src_slot[s] + j` to
//!   destination slot `slot_mapping[tok_offset[s] + j]`, which sits at
//!   position `dst_pos[s] + j`. K is rotated by `delta = dst_pos - stored_pos`
//!   (R(a)R(b) = R(a+b)); V is copied bit-for-bit. Destination slots < 0
//!   (vLLM's padding) are skipped.

use crate::dtype::KvDtype;
use crate::error::{KernelError, Result};
use crate::rope::RopeConfig;

/// Shapes shared by every layer of one scatter call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvShape {
    /// KV heads per layer.
    pub num_kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Slots in each layer's item pool.
    pub num_src_slots: usize,
    /// Slots in each layer's engine cache (`num_blocks * block_size`).
    pub num_dst_slots: usize,
    /// Tokens per engine block.
    pub block_size: usize,
    /// Elements between consecutive engine blocks.
    pub dst_block_stride: usize,
    /// Elements between consecutive tokens of one block.
    pub dst_token_stride: usize,
    /// Elements between consecutive heads of one token.
    pub dst_head_stride: usize,
}

impl KvShape {
    /// Elements in one token's row (`H * D`).
    pub fn row(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Strides of a compact `[num_blocks, block_size, H, D]` plane.
    pub fn compact(
        num_kv_heads: usize,
        head_dim: usize,
        num_src_slots: usize,
        num_dst_slots: usize,
        block_size: usize,
    ) -> Self {
        KvShape {
            num_kv_heads,
            head_dim,
            num_src_slots,
            num_dst_slots,
            block_size,
            dst_block_stride: block_size * num_kv_heads * head_dim,
            dst_token_stride: num_kv_heads * head_dim,
            dst_head_stride: head_dim,
        }
    }

    /// Element offset of head 0 of a destination slot from a layer's K (or V) base.
    pub fn dst_offset(&self, slot: usize) -> usize {
        (slot / self.block_size) * self.dst_block_stride
            + (slot % self.block_size) * self.dst_token_stride
    }

    /// Elements a K (or V) plane spans from its base: one past the last element of the
    /// last slot's last head.
    pub fn dst_span(&self) -> usize {
        if self.num_dst_slots == 0 {
            return 0;
        }
        self.dst_offset(self.num_dst_slots - 1)
            + (self.num_kv_heads - 1) * self.dst_head_stride
            + self.head_dim
    }

    /// Reject shapes the kernel cannot handle (it moves 16-byte vectors).
    pub fn validate(&self) -> Result<()> {
        if self.num_kv_heads == 0 {
            return Err(KernelError::invalid("num_kv_heads", "must be > 0"));
        }
        if self.head_dim == 0 || self.head_dim % 8 != 0 {
            return Err(KernelError::invalid(
                "head_dim",
                format!("{} must be a positive multiple of 8", self.head_dim),
            ));
        }
        if self.block_size == 0 {
            return Err(KernelError::invalid("block_size", "must be > 0"));
        }
        // 16-byte vectors at every head start; a stride shorter than a head would make
        // two heads (or tokens, or blocks) share elements.
        for (name, v) in [
            ("dst_block_stride", self.dst_block_stride),
            ("dst_token_stride", self.dst_token_stride),
            ("dst_head_stride", self.dst_head_stride),
        ] {
            if v % 8 != 0 || v < self.head_dim {
                return Err(KernelError::invalid(
                    name,
                    format!(
                        "{v} must be a multiple of 8 and >= head_dim {}",
                        self.head_dim
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// One item segment (host mirror of the four device arrays).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Pool slot of the item's first token.
    pub src_slot: i64,
    /// Tokens in the item.
    pub len: i32,
    /// Index of the item's first token in `slot_mapping`.
    pub tok_offset: i32,
    /// Target position of the item's first token in the request.
    pub dst_pos: i32,
}

/// One layer's buffers as raw storage bits.
pub struct LayerBuffers<'a> {
    /// Item pool K, `[num_src_slots, H, D]`.
    pub src_k: &'a [u16],
    /// Item pool V, `[num_src_slots, H, D]`.
    pub src_v: &'a [u16],
    /// The engine cache's storage for this layer: K and V may interleave in it (vLLM's
    /// `[.., 2*D]` content), so it is one buffer with two bases.
    pub dst: &'a mut [u16],
    /// Element offset of K's `(slot 0, head 0, 0)` in `dst`.
    pub dst_k_base: usize,
    /// Element offset of V's `(slot 0, head 0, 0)` in `dst`.
    pub dst_v_base: usize,
}

/// Check segments and slot mapping against the shape (host-side mirror of
/// what the kernel silently skips, for callers that hold host copies).
pub fn validate_segments(shape: &KvShape, segs: &[Segment], slot_mapping: &[i64]) -> Result<()> {
    for (i, s) in segs.iter().enumerate() {
        let end = s.src_slot + s.len as i64;
        if s.len < 0 || s.src_slot < 0 || end > shape.num_src_slots as i64 {
            return Err(KernelError::IndexOutOfRange {
                name: "seg_src_slot",
                at: i,
                value: end,
                bound: shape.num_src_slots as i64 + 1,
            });
        }
        let tok_end = s.tok_offset as i64 + s.len as i64;
        if s.tok_offset < 0 || tok_end > slot_mapping.len() as i64 {
            return Err(KernelError::IndexOutOfRange {
                name: "seg_tok_offset",
                at: i,
                value: tok_end,
                bound: slot_mapping.len() as i64 + 1,
            });
        }
    }
    for (i, &d) in slot_mapping.iter().enumerate() {
        if d >= shape.num_dst_slots as i64 {
            return Err(KernelError::IndexOutOfRange {
                name: "slot_mapping",
                at: i,
                value: d,
                bound: shape.num_dst_slots as i64,
            });
        }
    }
    Ok(())
}

/// CPU reference of one layer of the scatter kernel.
pub fn scatter_layer_reference(
    dtype: KvDtype,
    shape: &KvShape,
    rope: &RopeConfig,
    stored_pos: i32,
    segs: &[Segment],
    slot_mapping: &[i64],
    bufs: LayerBuffers<'_>,
) -> Result<()> {
    shape.validate()?;
    rope.validate(shape.head_dim)?;
    validate_segments(shape, segs, slot_mapping)?;
    let (h, d, row) = (shape.num_kv_heads, shape.head_dim, shape.row());
    for (name, base) in [
        ("dst_k_base", bufs.dst_k_base),
        ("dst_v_base", bufs.dst_v_base),
    ] {
        if base + shape.dst_span() > bufs.dst.len() {
            return Err(KernelError::invalid(
                name,
                format!(
                    "{base} + span {} exceeds the destination's {} elements",
                    shape.dst_span(),
                    bufs.dst.len()
                ),
            ));
        }
    }
    let mut head = vec![0f32; d];
    for s in segs {
        let (cos, sin) = rope.cos_sin(s.dst_pos - stored_pos);
        for j in 0..s.len as usize {
            let dst = slot_mapping[s.tok_offset as usize + j];
            if dst < 0 {
                continue;
            }
            let src_off = (s.src_slot as usize + j) * row;
            let dst_off = shape.dst_offset(dst as usize);
            for hh in 0..h {
                let so = src_off + hh * d;
                let vo = bufs.dst_v_base + dst_off + hh * shape.dst_head_stride;
                bufs.dst[vo..vo + d].copy_from_slice(&bufs.src_v[so..so + d]);
                let dof = bufs.dst_k_base + dst_off + hh * shape.dst_head_stride;
                for (x, &b) in head.iter_mut().zip(&bufs.src_k[so..so + d]) {
                    *x = dtype.to_f32(b);
                }
                rope.rotate(&mut head, &cos, &sin);
                // Unrotated tail dims are copied as bits, not round-tripped.
                let (out, src) = (&mut bufs.dst[dof..dof + d], &bufs.src_k[so..so + d]);
                for (e, (o, &b)) in out.iter_mut().zip(src).enumerate() {
                    *o = if e < rope.rotary_dim {
                        dtype.from_f32(head[e])
                    } else {
                        b
                    };
                }
            }
        }
    }
    Ok(())
}
