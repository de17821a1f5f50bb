// Item-KV scatter with RoPE re-rotation (recache issue 8).
//
// Copies item K/V segments from an item pool ([slots, H, D] per layer) into
// the engine's paged cache (flat slot = block * block_size + offset; head h of
// slot s at (s / block_size) * dst_block_stride + (s % block_size) *
// dst_token_stride + h * dst_head_stride from the layer's K or V base, so
// vLLM 0.32's interleaved [blocks, heads, tokens, 2*D] views in any of its
// stride orders fit), rotating K from its stored position to its
// target position by R(delta), delta = dst_pos - stored_pos. V is copied
// bit-for-bit. Layout and tolerance: kernels/README.md; CPU reference:
// kernels/src/scatter.rs.
//
// Self-contained on purpose: no headers, so NVRTC needs no toolkit includes.
// Requirements checked by the host (shim): head_dim % 8 == 0,
// rotary_dim % 8 == 0, rotary_dim <= head_dim, all base pointers 16-byte
// aligned, the three dst strides % 8 == 0. Compiled with --fmad=false.

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define RECACHE_MAX_LAYERS 64
#define RECACHE_MAX_HALF_ROT 128

// Per-layer base pointers of this launch's layers (the host splits models
// deeper than 64 layers into several launches), passed by value (2 KiB of
// kernel parameters) so the host can validate their alignment without a
// device round trip.
struct LayerPtrs {
    u64 src_k[RECACHE_MAX_LAYERS];
    u64 src_v[RECACHE_MAX_LAYERS];
    u64 dst_k[RECACHE_MAX_LAYERS];
    u64 dst_v[RECACHE_MAX_LAYERS];
};

// inv_freq[i] = theta^(-2i/rotary_dim), computed on the host in f64 so CPU
// and GPU use bit-identical frequencies.
struct RopeTable {
    float inv_freq[RECACHE_MAX_HALF_ROT];
};

struct ScatterShape {
    int num_heads;
    int head_dim;
    int rotary_dim;
    int block_size;
    i64 dst_block_stride;  // elements between engine blocks
    i64 dst_token_stride;  // elements between tokens of a block
    i64 dst_head_stride;   // elements between heads of a token
    i64 num_src_slots;
    i64 num_dst_slots;
    i64 num_tokens;        // length of slot_mapping
    int stored_pos;        // position every item's first token was computed at
};

__device__ __forceinline__ float to_f32(u16 h, bool bf16) {
    if (bf16) return __uint_as_float(((u32)h) << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 from_f32(float f, bool bf16) {
    u16 h;
    if (bf16) asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    else asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

// Unpack/pack 4 halves held in a uint2.
__device__ __forceinline__ void unpack4(uint2 v, float* x, bool bf16) {
    x[0] = to_f32((u16)(v.x & 0xffff), bf16); x[1] = to_f32((u16)(v.x >> 16), bf16);
    x[2] = to_f32((u16)(v.y & 0xffff), bf16); x[3] = to_f32((u16)(v.y >> 16), bf16);
}
__device__ __forceinline__ uint2 pack4(const float* x, bool bf16) {
    uint2 v;
    v.x = (u32)from_f32(x[0], bf16) | ((u32)from_f32(x[1], bf16) << 16);
    v.y = (u32)from_f32(x[2], bf16) | ((u32)from_f32(x[3], bf16) << 16);
    return v;
}

// One block per (segment, layer). Each thread step moves one 8-element unit of
// one token's head for both K and V: V and K's unrotated tail as a 16-byte
// copy, K's rotary part rotated in fp32.
template <bool BF16, bool NEOX>
__device__ void scatter_impl(
    const LayerPtrs& ptrs, const ScatterShape& sh, const RopeTable& rope,
    const i64* __restrict__ seg_src_slot, const int* __restrict__ seg_len,
    const int* __restrict__ seg_tok_offset, const int* __restrict__ seg_dst_pos,
    const i64* __restrict__ slot_mapping)
{
    __shared__ float s_cos[RECACHE_MAX_HALF_ROT];
    __shared__ float s_sin[RECACHE_MAX_HALF_ROT];
    const int seg = blockIdx.x;
    const int layer = blockIdx.y;
    const int half = sh.rotary_dim / 2;
    // delta is constant per segment: every token shifts by the same amount.
    const int delta = seg_dst_pos[seg] - sh.stored_pos;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float s, c;
        sincosf((float)delta * rope.inv_freq[i], &s, &c);
        s_cos[i] = c;
        s_sin[i] = s;
    }
    __syncthreads();

    const u16* sk = (const u16*)ptrs.src_k[layer];
    const u16* sv = (const u16*)ptrs.src_v[layer];
    u16* dk = (u16*)ptrs.dst_k[layer];
    u16* dv = (u16*)ptrs.dst_v[layer];
    const int len = seg_len[seg];
    const i64 src0 = seg_src_slot[seg];
    const int tok0 = seg_tok_offset[seg];
    const int units_per_head = sh.head_dim / 8;
    const int units_per_tok = sh.num_heads * units_per_head;
    const int rot_units = sh.rotary_dim / 8;
    const i64 row = (i64)sh.num_heads * sh.head_dim;
    const i64 total = (i64)len * units_per_tok;

    for (i64 u = threadIdx.x; u < total; u += blockDim.x) {
        const int t = (int)(u / units_per_tok);
        const int r = (int)(u % units_per_tok);
        const int h = r / units_per_head;
        const int j = r % units_per_head;
        const i64 s = src0 + t;
        if ((i64)tok0 + t < 0 || (i64)tok0 + t >= sh.num_tokens) continue;
        const i64 d = slot_mapping[tok0 + t];
        // Padding (-1) and out-of-range slots are skipped, never written.
        if (s < 0 || s >= sh.num_src_slots || d < 0 || d >= sh.num_dst_slots) continue;
        const i64 so = s * row + (i64)h * sh.head_dim;
        const i64 dof = (d / sh.block_size) * sh.dst_block_stride
                      + (d % sh.block_size) * sh.dst_token_stride
                      + (i64)h * sh.dst_head_stride;

        *(uint4*)(dv + dof + j * 8) = *(const uint4*)(sv + so + j * 8);

        if (j >= rot_units) {
            *(uint4*)(dk + dof + j * 8) = *(const uint4*)(sk + so + j * 8);
        } else if (NEOX) {
            // Unit j holds dims [4j, 4j+4) and their partners [half+4j, ...).
            const int q = j * 4;
            float x[4], y[4], ox[4], oy[4];
            unpack4(*(const uint2*)(sk + so + q), x, BF16);
            unpack4(*(const uint2*)(sk + so + half + q), y, BF16);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float c = s_cos[q + e], sn = s_sin[q + e];
                ox[e] = x[e] * c - y[e] * sn;
                oy[e] = y[e] * c + x[e] * sn;
            }
            *(uint2*)(dk + dof + q) = pack4(ox, BF16);
            *(uint2*)(dk + dof + half + q) = pack4(oy, BF16);
        } else {
            // GPT-J: unit j holds 4 interleaved pairs (2i, 2i+1), i = 4j + e.
            float v[8], o[8];
            const uint4 raw = *(const uint4*)(sk + so + j * 8);
            unpack4(make_uint2(raw.x, raw.y), v, BF16);
            unpack4(make_uint2(raw.z, raw.w), v + 4, BF16);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float c = s_cos[j * 4 + e], sn = s_sin[j * 4 + e];
                o[2 * e] = v[2 * e] * c - v[2 * e + 1] * sn;
                o[2 * e + 1] = v[2 * e + 1] * c + v[2 * e] * sn;
            }
            const uint2 lo = pack4(o, BF16), hi = pack4(o + 4, BF16);
            *(uint4*)(dk + dof + j * 8) = make_uint4(lo.x, lo.y, hi.x, hi.y);
        }
    }
}

#define RECACHE_SCATTER_ENTRY(NAME, BF16, NEOX)                                     \
    extern "C" __global__ void __launch_bounds__(256) NAME(                         \
        const LayerPtrs ptrs, const ScatterShape sh, const RopeTable rope,          \
        const i64* seg_src_slot, const int* seg_len, const int* seg_tok_offset,     \
        const int* seg_dst_pos, const i64* slot_mapping)                            \
    {                                                                               \
        scatter_impl<BF16, NEOX>(ptrs, sh, rope, seg_src_slot, seg_len,             \
                                 seg_tok_offset, seg_dst_pos, slot_mapping);        \
    }

RECACHE_SCATTER_ENTRY(recache_item_kv_scatter_f16_neox, false, true)
RECACHE_SCATTER_ENTRY(recache_item_kv_scatter_f16_gptj, false, false)
RECACHE_SCATTER_ENTRY(recache_item_kv_scatter_bf16_neox, true, true)
RECACHE_SCATTER_ENTRY(recache_item_kv_scatter_bf16_gptj, true, false)
