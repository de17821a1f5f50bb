//! GPU vs CPU-reference parity on realistic shapes (Qwen2-1.5B: 28 layers,
//! 2 KV heads, head dim 128; 100 items x 18 tokens; beam width = K = 512).
//! Needs a CUDA driver and device, so each test is `#[ignore]`d: plain `cargo
//! test` (and tests/run, on CI without a GPU) lists them as ignored; on a GPU
//! machine run `cargo test -p recache-shim --test gpu_parity -- --include-ignored`.
//!
//! Comparison: V and unrotated K bit-for-bit; rotated K within
//! `rope_tolerance`; beam outputs (parents, tokens, scores, nodes) exactly.

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr, DeviceRepr};
use recache_kernels::beam::{BeamStep, beam_topk_reference};
use recache_kernels::dtype::KvDtype;
use recache_kernels::rope::{RopeConfig, RopeStyle, rope_tolerance};
use recache_kernels::scatter::{KvShape, LayerBuffers, scatter_layer_reference};
use recache_kernels::testing::{
    Rng, random_beam_nodes, random_items, random_log_probs, random_segments,
};
use recache_kernels::trie::Trie;
use recache_shim::launch::{self, BeamArgs, LayerPointers, ScatterArgs};
use recache_shim::loader;
use std::sync::Arc;

fn gpu() -> (Arc<CudaContext>, Arc<CudaStream>) {
    if let Err(e) = loader::driver_available() {
        panic!("GPU parity test needs a CUDA GPU: {}", e.full_message());
    }
    let ctx = CudaContext::new(0).expect("primary context");
    let stream = ctx.new_stream().expect("stream");
    (ctx, stream)
}

fn up<T: DeviceRepr>(s: &Arc<CudaStream>, v: &[T]) -> CudaSlice<T> {
    s.clone_htod(v).expect("upload")
}

fn ptr<T>(s: &Arc<CudaStream>, d: &CudaSlice<T>) -> u64 {
    let (p, _sync) = d.device_ptr(s);
    p
}

#[test]
#[ignore = "needs a CUDA GPU (run with --include-ignored on one)"]
fn scatter_matches_cpu_reference() {
    let (_ctx, s) = gpu();
    let mut rng = Rng::new(42);
    let (layers, items, len) = (28, 100, 18);
    // vLLM 0.32's default GPU layout (LBNHC): one [blocks, tokens, heads, 2*D] buffer per
    // layer, K in the first D of each head's content and V in the second.
    let (heads, dim, bs) = (2usize, 128usize, 16usize);
    let sh = KvShape {
        num_kv_heads: heads,
        head_dim: dim,
        num_src_slots: 400 * len,
        num_dst_slots: 1024 * bs,
        block_size: bs,
        dst_block_stride: bs * heads * 2 * dim,
        dst_token_stride: heads * 2 * dim,
        dst_head_stride: 2 * dim,
    };
    for (dt, style, rot) in [
        (KvDtype::Bf16, RopeStyle::NeoX, 128),
        (KvDtype::F16, RopeStyle::GptJ, 64),
    ] {
        let rope = RopeConfig {
            rotary_dim: rot,
            theta: 1e6,
            style,
        };
        let (segs, slots) = random_segments(&mut rng, items, len, 400, sh.num_dst_slots, 8192);
        let stored_pos = 3;
        let n_src = sh.num_src_slots * sh.row();
        let n_dst = sh.num_dst_slots * sh.row() * 2;
        let host: Vec<[Vec<u16>; 2]> = (0..layers)
            .map(|_| [rng.kv_bits(dt, n_src), rng.kv_bits(dt, n_src)])
            .collect();
        let dev: Vec<_> = host
            .iter()
            .map(|[k, v]| (up(&s, k), up(&s, v), s.alloc_zeros::<u16>(n_dst).unwrap()))
            .collect();
        let lp: Vec<LayerPointers> = dev
            .iter()
            .map(|(a, b, c)| LayerPointers {
                src_k: ptr(&s, a),
                src_v: ptr(&s, b),
                dst_k: ptr(&s, c),
                dst_v: ptr(&s, c) + 2 * dim as u64,
            })
            .collect();
        let d_src = up(&s, &segs.iter().map(|g| g.src_slot).collect::<Vec<_>>());
        let d_len = up(&s, &segs.iter().map(|g| g.len).collect::<Vec<_>>());
        let d_off = up(&s, &segs.iter().map(|g| g.tok_offset).collect::<Vec<_>>());
        let d_pos = up(&s, &segs.iter().map(|g| g.dst_pos).collect::<Vec<_>>());
        let d_slots = up(&s, &slots);
        let args = ScatterArgs {
            dtype: dt,
            layers: &lp,
            shape: sh,
            rope,
            stored_pos,
            num_segments: items,
            seg_src_slot: ptr(&s, &d_src),
            seg_len: ptr(&s, &d_len),
            seg_tok_offset: ptr(&s, &d_off),
            seg_dst_pos: ptr(&s, &d_pos),
            slot_mapping: ptr(&s, &d_slots),
            num_tokens: slots.len(),
        };
        unsafe { launch::item_kv_scatter(0, s.cu_stream(), &args) }.expect("launch");
        s.synchronize().expect("sync");
        let mut worst = 0f32;
        for (l, (_, _, dkv)) in dev.iter().enumerate() {
            let gpu_out = s.clone_dtoh(dkv).unwrap();
            let mut cpu_out = vec![0u16; n_dst];
            let bufs = LayerBuffers {
                src_k: &host[l][0],
                src_v: &host[l][1],
                dst: &mut cpu_out,
                dst_k_base: 0,
                dst_v_base: dim,
            };
            scatter_layer_reference(dt, &sh, &rope, stored_pos, &segs, &slots, bufs).unwrap();
            for (i, (&g, &c)) in gpu_out.iter().zip(&cpu_out).enumerate() {
                if g == c {
                    continue;
                }
                // Element e of a head's [K | V] content: V (e >= D) must match bit for bit.
                let e = i % (2 * dim);
                assert!(e < dim, "layer {l} elem {i}: V must match bit-for-bit");
                assert!(
                    e < rot,
                    "layer {l} elem {i}: unrotated K must match bit-for-bit"
                );
                let (gf, cf) = (dt.to_f32(g), dt.to_f32(c));
                let tol = rope_tolerance(dt, 4.0, 4.0, cf);
                worst = worst.max((gf - cf).abs() / tol);
                assert!(
                    (gf - cf).abs() <= tol,
                    "layer {l} elem {i}: {gf} vs {cf} (tol {tol})"
                );
            }
        }
        println!(
            "scatter {dt:?} {style:?}: K within tolerance (worst {worst:.3} of tol), V bit-exact"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU (run with --include-ignored on one)"]
fn beam_topk_matches_cpu_reference() {
    let (_ctx, s) = gpu();
    let mut rng = Rng::new(7);
    let (bw, k, codebook) = (512usize, 512usize, 256u32);
    let trie = Trie::from_items(&random_items(&mut rng, 200_000, 3, codebook));
    let vocab = 151_936usize;
    for depth in [0, 1, 2] {
        let lp = random_log_probs(&mut rng, bw * vocab);
        let scores = random_log_probs(&mut rng, bw);
        let nodes = random_beam_nodes(&mut rng, &trie, bw, depth);
        let step = BeamStep {
            log_probs: &lp,
            row_stride: vocab,
            vocab,
            beam_scores: &scores,
            beam_node: &nodes,
            trie: &trie,
            per_beam_k: k,
        };
        let want = beam_topk_reference(&step).unwrap();
        let (d_lp, d_sc, d_nd) = (up(&s, &lp), up(&s, &scores), up(&s, &nodes));
        let (d_rp, d_ct, d_cn) = (
            up(&s, &trie.row_ptr),
            up(&s, &trie.child_token),
            up(&s, &trie.child_node),
        );
        let ws_bytes = launch::beam_workspace_bytes(bw, k);
        let ws = s.alloc_zeros::<u8>(ws_bytes).unwrap();
        let (op, ot, os, on) = (
            s.alloc_zeros::<i32>(bw).unwrap(),
            s.alloc_zeros::<i32>(bw).unwrap(),
            s.alloc_zeros::<f32>(bw).unwrap(),
            s.alloc_zeros::<i32>(bw).unwrap(),
        );
        let vis = s.alloc_zeros::<u32>(1).unwrap();
        let args = BeamArgs {
            log_probs: ptr(&s, &d_lp),
            beam_width: bw,
            vocab,
            row_stride: vocab,
            beam_scores: ptr(&s, &d_sc),
            beam_node: ptr(&s, &d_nd),
            trie_row_ptr: ptr(&s, &d_rp),
            trie_child_token: ptr(&s, &d_ct),
            trie_child_node: ptr(&s, &d_cn),
            num_nodes: trie.num_nodes(),
            per_beam_k: k,
            workspace: ptr(&s, &ws),
            workspace_bytes: ws_bytes,
            out_parent: ptr(&s, &op),
            out_token: ptr(&s, &ot),
            out_score: ptr(&s, &os),
            out_node: ptr(&s, &on),
            out_visited: ptr(&s, &vis),
        };
        unsafe { launch::beam_topk(0, s.cu_stream(), &args) }.expect("launch");
        s.synchronize().expect("sync");
        let (gp, gt, gs, gn) = (
            s.clone_dtoh(&op).unwrap(),
            s.clone_dtoh(&ot).unwrap(),
            s.clone_dtoh(&os).unwrap(),
            s.clone_dtoh(&on).unwrap(),
        );
        for (i, w) in want.choices.iter().enumerate() {
            assert_eq!(
                (gp[i], gt[i], gn[i]),
                (w.parent, w.token, w.node),
                "depth {depth} rank {i}"
            );
            assert_eq!(
                gs[i].to_bits(),
                w.score.to_bits(),
                "depth {depth} rank {i} score"
            );
        }
        let visited = s.clone_dtoh(&vis).unwrap()[0];
        println!(
            "beam depth {depth}: exact match; GPU examined {visited} of {} candidates (CPU heap {})",
            want.total, want.visited
        );
    }
}
