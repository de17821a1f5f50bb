//! CPU reference tests of the item-KV scatter.

use recache_kernels::dtype::KvDtype;
use recache_kernels::rope::{RopeConfig, RopeStyle};
use recache_kernels::scatter::{KvShape, LayerBuffers, Segment, scatter_layer_reference};
use recache_kernels::testing::{Rng, random_segments};

fn shape(blocks: usize) -> KvShape {
    KvShape::compact(2, 128, 100 * 18, blocks * 16, 16)
}

/// K and V planes of a compact shape in one buffer: K first, V after it.
fn planes(sh: &KvShape, fill: u16) -> (Vec<u16>, usize) {
    (vec![fill; 2 * sh.dst_span()], sh.dst_span())
}

#[test]
fn v_is_copied_bitwise_and_k_rotated() {
    let mut rng = Rng::new(10);
    let sh = shape(256);
    let rope = RopeConfig {
        rotary_dim: 128,
        theta: 1e6,
        style: RopeStyle::NeoX,
    };
    for dt in [KvDtype::F16, KvDtype::Bf16] {
        let src_k = rng.kv_bits(dt, sh.num_src_slots * sh.row());
        let src_v = rng.kv_bits(dt, sh.num_src_slots * sh.row());
        let (mut dst, vb) = planes(&sh, 0);
        let (segs, slots) = random_segments(&mut rng, 100, 18, 100, sh.num_dst_slots, 4096);
        let bufs = LayerBuffers {
            src_k: &src_k,
            src_v: &src_v,
            dst: &mut dst,
            dst_k_base: 0,
            dst_v_base: vb,
        };
        scatter_layer_reference(dt, &sh, &rope, 0, &segs, &slots, bufs).unwrap();
        let (dst_k, dst_v) = dst.split_at(vb);
        for s in &segs {
            for j in 0..s.len as usize {
                let (so, d) = (
                    (s.src_slot as usize + j) * sh.row(),
                    sh.dst_offset(slots[s.tok_offset as usize + j] as usize),
                );
                assert_eq!(dst_v[d..d + sh.row()], src_v[so..so + sh.row()]);
                if s.dst_pos == 0 {
                    assert_eq!(dst_k[d..d + sh.row()], src_k[so..so + sh.row()]);
                }
            }
        }
    }
}

#[test]
fn zero_delta_copies_k_exactly_and_padding_is_skipped() {
    let mut rng = Rng::new(11);
    let sh = shape(4);
    let rope = RopeConfig {
        rotary_dim: 64,
        theta: 1e4,
        style: RopeStyle::GptJ,
    };
    let dt = KvDtype::Bf16;
    let src_k = rng.kv_bits(dt, sh.num_src_slots * sh.row());
    let src_v = rng.kv_bits(dt, sh.num_src_slots * sh.row());
    let (mut dst, vb) = planes(&sh, 7);
    let segs = [Segment {
        src_slot: 36,
        len: 3,
        tok_offset: 0,
        dst_pos: 5,
    }];
    let slots = [17i64, -1, 40];
    let bufs = LayerBuffers {
        src_k: &src_k,
        src_v: &src_v,
        dst: &mut dst,
        dst_k_base: 0,
        dst_v_base: vb,
    };
    scatter_layer_reference(dt, &sh, &rope, 5, &segs, &slots, bufs).unwrap();
    let (dst_k, dst_v) = dst.split_at(vb);
    let r = sh.row();
    assert_eq!(
        dst_k[sh.dst_offset(17)..sh.dst_offset(17) + r],
        src_k[36 * r..37 * r]
    );
    assert_eq!(
        dst_k[sh.dst_offset(40)..sh.dst_offset(40) + r],
        src_k[38 * r..39 * r]
    );
    let written = 2 * r;
    assert!(dst_k.iter().filter(|&&b| b != 7).count() <= written);
    assert!(
        dst_v[sh.dst_offset(18)..sh.dst_offset(18) + r]
            .iter()
            .all(|&b| b == 7),
        "slot -1 skipped"
    );
}

#[test]
fn out_of_range_inputs_are_rejected() {
    let sh = shape(4);
    let rope = RopeConfig {
        rotary_dim: 128,
        theta: 1e6,
        style: RopeStyle::NeoX,
    };
    let z = vec![0u16; sh.num_src_slots * sh.row()];
    let (mut dst, vb) = planes(&sh, 0);
    let bad = [Segment {
        src_slot: 1799,
        len: 2,
        tok_offset: 0,
        dst_pos: 0,
    }];
    let bufs = LayerBuffers {
        src_k: &z,
        src_v: &z,
        dst: &mut dst,
        dst_k_base: 0,
        dst_v_base: vb,
    };
    assert!(scatter_layer_reference(KvDtype::F16, &sh, &rope, 0, &bad, &[0, 1], bufs).is_err());
    let mut s2 = sh;
    s2.head_dim = 100;
    assert!(s2.validate().is_err());
    let mut s3 = sh;
    s3.dst_head_stride = 64; // shorter than a head: heads would overlap
    assert!(s3.validate().is_err());
    // A base whose span runs past the buffer is refused, not written out of bounds.
    let ok = [Segment {
        src_slot: 0,
        len: 1,
        tok_offset: 0,
        dst_pos: 0,
    }];
    let bufs = LayerBuffers {
        src_k: &z,
        src_v: &z,
        dst: &mut dst,
        dst_k_base: 0,
        dst_v_base: vb + 8,
    };
    assert!(scatter_layer_reference(KvDtype::F16, &sh, &rope, 0, &ok, &[0], bufs).is_err());
}

/// vLLM 0.32 keeps one `[blocks, heads, tokens, 2*D]` view per layer (K in the first `D` of
/// the content, V in the second) in a stride order of its `KVCacheLayout`: token-major
/// blocks (`LBNHC`, FlashAttention's default) and head-major ones (`LBHNC`, FlashInfer's
/// HND). Scattering into either must put, element for element, what a compact K/V plane
/// gets.
#[test]
fn interleaved_vllm_layouts_equal_the_compact_planes() {
    let mut rng = Rng::new(12);
    let (h, d, bs, blocks) = (2usize, 128usize, 16usize, 32usize);
    let compact = KvShape::compact(h, d, 100 * 18, blocks * bs, bs);
    let rope = RopeConfig {
        rotary_dim: 128,
        theta: 1e6,
        style: RopeStyle::NeoX,
    };
    let dt = KvDtype::Bf16;
    let src_k = rng.kv_bits(dt, compact.num_src_slots * compact.row());
    let src_v = rng.kv_bits(dt, compact.num_src_slots * compact.row());
    let (segs, slots) = random_segments(&mut rng, 20, 18, 100, compact.num_dst_slots, 4096);
    let (mut want, vb) = planes(&compact, 0);
    let bufs = LayerBuffers {
        src_k: &src_k,
        src_v: &src_v,
        dst: &mut want,
        dst_k_base: 0,
        dst_v_base: vb,
    };
    scatter_layer_reference(dt, &compact, &rope, 3, &segs, &slots, bufs).unwrap();
    // (token stride, head stride) of the [blocks, heads, tokens, 2D] view per layout.
    for (name, tok, head) in [("LBNHC", h * 2 * d, 2 * d), ("LBHNC", 2 * d, bs * 2 * d)] {
        let sh = KvShape {
            dst_block_stride: bs * h * 2 * d,
            dst_token_stride: tok,
            dst_head_stride: head,
            ..compact
        };
        let mut got = vec![0u16; blocks * bs * h * 2 * d];
        let bufs = LayerBuffers {
            src_k: &src_k,
            src_v: &src_v,
            dst: &mut got,
            dst_k_base: 0,
            dst_v_base: d,
        };
        scatter_layer_reference(dt, &sh, &rope, 3, &segs, &slots, bufs).unwrap();
        for slot in 0..compact.num_dst_slots {
            for hh in 0..h {
                let c = compact.dst_offset(slot) + hh * d;
                let g = sh.dst_offset(slot) + hh * sh.dst_head_stride;
                assert_eq!(
                    got[g..g + d],
                    want[c..c + d],
                    "{name} K slot {slot} head {hh}"
                );
                assert_eq!(
                    got[g + d..g + 2 * d],
                    want[vb + c..vb + c + d],
                    "{name} V slot {slot} head {hh}"
                );
            }
        }
    }
}
