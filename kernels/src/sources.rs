//! The CUDA sources, their entry points and the one set of NVRTC options.
//!
//! Every compile path (the shim's build-time `nvcc`, its first-use NVRTC and
//! the CI check) takes sources and flags from here so they cannot drift.
//! The sources include no headers: NVRTC needs no CUDA toolkit include
//! directory, and fp16/bf16 conversions use inline PTX `cvt`.

/// A CUDA translation unit with its `extern "C"` kernels.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// Module name (file stem), also the PTX file name.
    pub name: &'static str,
    /// CUDA C++ source text.
    pub source: &'static str,
    /// Entry points the loader looks up.
    pub entry_points: &'static [&'static str],
}

/// Item-KV scatter with RoPE re-rotation.
pub const ITEM_KV_SCATTER: KernelSource = KernelSource {
    name: "item_kv_scatter",
    source: include_str!("../cuda/item_kv_scatter.cu"),
    entry_points: &[
        "recache_item_kv_scatter_f16_neox",
        "recache_item_kv_scatter_f16_gptj",
        "recache_item_kv_scatter_bf16_neox",
        "recache_item_kv_scatter_bf16_gptj",
    ],
};

/// Constrained beam top-k (per-beam candidates + global selection).
pub const BEAM_TOPK: KernelSource = KernelSource {
    name: "beam_topk",
    source: include_str!("../cuda/beam_topk.cu"),
    entry_points: &["recache_beam_candidates", "recache_beam_select"],
};

/// All kernels, in load order.
pub const ALL: &[KernelSource] = &[ITEM_KV_SCATTER, BEAM_TOPK];

/// Lowest architecture the kernels target (`cvt.rn.bf16.f32` needs sm_80).
pub const MIN_ARCH: &str = "compute_80";

/// Architectures CI assembles for.
pub const CI_ARCHS: &[(&str, &str)] = &[("compute_80", "sm_80"), ("compute_90", "sm_90")];

/// Options beyond `--gpu-architecture`. `--fmad=false` keeps the RoPE
/// arithmetic identical to the CPU reference (no contraction into FMA).
pub const NVRTC_OPTIONS: &[&str] = &["--fmad=false", "--std=c++17", "-default-device"];

/// Threads per block of the scatter kernel.
pub const SCATTER_THREADS: u32 = 256;
/// Threads per block of the per-beam candidate kernel.
pub const CANDIDATE_THREADS: u32 = 512;
/// Threads of the single-block selection kernel.
pub const SELECT_THREADS: u32 = 1024;
/// Layers one scatter launch handles (its by-value pointer table).
pub const SCATTER_MAX_LAYERS: usize = 64;
