//! Item-KV scatter with RoPE re-rotation: descriptors, validation and the CPU
//! reference.
//!
//! Layout conventions (shared with `cuda/item_kv_scatter.cu`):
//! - Item pool, per layer, K and V separately: `[num_src_slots, H, D]`
//!   contiguous. Item tokens occupy consecutive slots; every item's first token
//!   was computed at position `stored_pos`.
//! - Engine cache, per layer, K and V separately: vLLM paged
//!   `[num_blocks, block_size, H, D]`, addressed by a flat slot
//!   `block * block_size + offset`. `dst_block_stride` (elements between
//!   consecutive blocks) is `block_size*H*D` for vLLM's layout and larger for
//!   layouts that interleave K and V per block.
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
}

impl KvShape {
    /// Elements in one token's row (`H * D`).
    pub fn row(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Element offset of a destination slot within a layer's cache.
    pub fn dst_offset(&self, slot: usize) -> usize {
        (slot / self.block_size) * self.dst_block_stride + (slot % self.block_size) * self.row()
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
        if self.dst_block_stride % 8 != 0 || self.dst_block_stride < self.block_size * self.row() {
            return Err(KernelError::invalid(
                "dst_block_stride",
                format!(
                    "{} must be a multiple of 8 and >= block_size*H*D",
                    self.dst_block_stride
                ),
            ));
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
    /// Engine cache K.
    pub dst_k: &'a mut [u16],
    /// Engine cache V.
    pub dst_v: &'a mut [u16],
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
            bufs.dst_v[dst_off..dst_off + row].copy_from_slice(&bufs.src_v[src_off..src_off + row]);
            for hh in 0..h {
                let (so, dof) = (src_off + hh * d, dst_off + hh * d);
                for (x, &b) in head.iter_mut().zip(&bufs.src_k[so..so + d]) {
                    *x = dtype.to_f32(b);
                }
                rope.rotate(&mut head, &cos, &sin);
                // Unrotated tail dims are copied as bits, not round-tripped.
                let (out, src) = (&mut bufs.dst_k[dof..dof + d], &bufs.src_k[so..so + d]);
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
