//! CPU reference tests of the item-KV scatter.

use recache_kernels::dtype::KvDtype;
use recache_kernels::rope::{RopeConfig, RopeStyle};
use recache_kernels::scatter::{KvShape, LayerBuffers, Segment, scatter_layer_reference};
use recache_kernels::testing::{Rng, random_segments};

fn shape(blocks: usize) -> KvShape {
    KvShape {
        num_kv_heads: 2,
        head_dim: 128,
        num_src_slots: 100 * 18,
        num_dst_slots: blocks * 16,
        block_size: 16,
        dst_block_stride: 16 * 2 * 128,
    }
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
        let mut dst_k = vec![0u16; sh.num_dst_slots * sh.row()];
        let mut dst_v = vec![0u16; sh.num_dst_slots * sh.row()];
        let (segs, slots) = random_segments(&mut rng, 100, 18, 100, sh.num_dst_slots, 4096);
        let bufs = LayerBuffers {
            src_k: &src_k,
            src_v: &src_v,
            dst_k: &mut dst_k,
            dst_v: &mut dst_v,
        };
        scatter_layer_reference(dt, &sh, &rope, 0, &segs, &slots, bufs).unwrap();
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
    let mut dst_k = vec![7u16; sh.num_dst_slots * sh.row()];
    let mut dst_v = vec![7u16; sh.num_dst_slots * sh.row()];
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
        dst_k: &mut dst_k,
        dst_v: &mut dst_v,
    };
    scatter_layer_reference(dt, &sh, &rope, 5, &segs, &slots, bufs).unwrap();
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
    let mut dk = vec![0u16; sh.num_dst_slots * sh.row()];
    let mut dv = dk.clone();
    let bad = [Segment {
        src_slot: 1799,
        len: 2,
        tok_offset: 0,
        dst_pos: 0,
    }];
    let bufs = LayerBuffers {
        src_k: &z,
        src_v: &z,
        dst_k: &mut dk,
        dst_v: &mut dv,
    };
    assert!(scatter_layer_reference(KvDtype::F16, &sh, &rope, 0, &bad, &[0, 1], bufs).is_err());
    let mut s2 = sh;
    s2.head_dim = 100;
    assert!(s2.validate().is_err());
}
