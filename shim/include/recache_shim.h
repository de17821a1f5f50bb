/* recache-shim C ABI, version 2 (recache_shim_abi_version()).
 *
 * Library: librecache_shim.so (cargo build -p recache-shim --release).
 * Every fallible function returns a recache_status_t; on failure the calling
 * thread's message is read with recache_shim_last_error(). Kernels are
 * enqueued on the caller's CUstream (pass NULL for the legacy default stream)
 * and run asynchronously; device memory must stay alive until they finish.
 * Device memory and streams must belong to the device's primary context (the
 * one the CUDA runtime / PyTorch uses). Layouts and tolerances:
 * kernels/README.md. */
#ifndef RECACHE_SHIM_H
#define RECACHE_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    RECACHE_OK = 0,
    RECACHE_ERR_INVALID_ARGUMENT = 1, /* bad shape/parameter/null; nothing launched */
    RECACHE_ERR_CUDA_UNAVAILABLE = 2, /* no libcuda / no device / < sm_80 */
    RECACHE_ERR_COMPILE_FAILED = 3,   /* NVRTC missing or kernel compile failed */
    RECACHE_ERR_DRIVER = 4,           /* module load or launch failed */
    RECACHE_ERR_PANIC = 5             /* internal bug, caught at the boundary */
} recache_status_t;

uint32_t recache_shim_abi_version(void);

/* Copies the last error (NUL-terminated, truncated) into buf if non-NULL;
 * returns the full message length in bytes. Empty after a success. */
size_t recache_shim_last_error(char *buf, size_t buf_len);

/* RECACHE_OK when the kernels can run on the device. First call per device
 * initialises the driver and compiles the kernels (NVRTC) unless nvcc built
 * them into the library. */
int32_t recache_shim_kernels_available(int32_t device_ordinal);

/* Item-KV scatter with RoPE re-rotation.
 * *_layers: HOST arrays [num_layers] of DEVICE addresses (16-byte aligned):
 *   src: item pool [num_src_slots, num_kv_heads, head_dim] per layer;
 *   dst: paged cache, head h of slot s at (s / block_size) * dst_block_stride
 *        + (s % block_size) * dst_token_stride + h * dst_head_stride elements
 *        from the layer's K or V base (vLLM 0.32's [blocks, heads, tokens, 2*D]
 *        views in any KVCacheLayout: V's base is K's + head_dim); the three
 *        strides multiples of 8 and >= head_dim.
 * seg_*: DEVICE arrays [num_segments]; segment i copies seg_len[i] tokens from
 *   pool slot seg_src_slot[i] + j to slot_mapping[seg_tok_offset[i] + j]
 *   (DEVICE int64 [num_tokens]; < 0 skips), rotating K by
 *   seg_dst_pos[i] - stored_pos. dtype: 0 fp16, 1 bf16. rope_style: 0 NeoX,
 *   1 GPT-J. head_dim, rotary_dim multiples of 8; rotary_dim <= head_dim. */
int32_t recache_item_kv_scatter(
    int32_t device_ordinal, void *stream, int32_t dtype, int32_t num_layers,
    const uint64_t *src_k_layers, const uint64_t *src_v_layers,
    const uint64_t *dst_k_layers, const uint64_t *dst_v_layers,
    int32_t num_kv_heads, int32_t head_dim, int64_t num_src_slots, int64_t num_dst_slots,
    int32_t block_size, int64_t dst_block_stride, int64_t dst_token_stride,
    int64_t dst_head_stride,
    int32_t num_segments, const int64_t *seg_src_slot, const int32_t *seg_len,
    const int32_t *seg_tok_offset, const int32_t *seg_dst_pos,
    const int64_t *slot_mapping, int64_t num_tokens,
    int32_t stored_pos, int32_t rotary_dim, float rope_theta, int32_t rope_style);

/* The same scatter through the kernel's CPU reference, synchronously, with every
 * pointer (layer tables, pool, cache, segments, slot_mapping) a HOST address. For
 * tests of callers' layout arithmetic without a GPU, and as a slow fallback. */
int32_t recache_item_kv_scatter_host(
    int32_t dtype, int32_t num_layers,
    const uint64_t *src_k_layers, const uint64_t *src_v_layers,
    const uint64_t *dst_k_layers, const uint64_t *dst_v_layers,
    int32_t num_kv_heads, int32_t head_dim, int64_t num_src_slots, int64_t num_dst_slots,
    int32_t block_size, int64_t dst_block_stride, int64_t dst_token_stride,
    int64_t dst_head_stride,
    int32_t num_segments, const int64_t *seg_src_slot, const int32_t *seg_len,
    const int32_t *seg_tok_offset, const int32_t *seg_dst_pos,
    const int64_t *slot_mapping, int64_t num_tokens,
    int32_t stored_pos, int32_t rotary_dim, float rope_theta, int32_t rope_style);

/* Bytes of workspace recache_beam_topk needs (0 for negative sizes). */
size_t recache_beam_topk_workspace_bytes(int32_t beam_width, int32_t per_beam_k);

/* Constrained beam top-k step. All pointers DEVICE; out_visited may be NULL.
 * log_probs f32 [beam_width, row_stride]; beam_scores f32 [beam_width];
 * beam_node i32 [beam_width] (< 0 = inactive beam); trie CSR: row_ptr i32
 * [num_nodes + 1], child_token / child_node i32 [nnz], tokens ascending per
 * row. Outputs [beam_width], best first, ties by (beam, token); padding is
 * (-1, -1, -inf, -1). beam_width <= 2048, per_beam_k <= 1024,
 * beam_width * vocab_size < 2^32. */
int32_t recache_beam_topk(
    int32_t device_ordinal, void *stream, const float *log_probs, int32_t beam_width,
    int32_t vocab_size, int64_t row_stride, const float *beam_scores, const int32_t *beam_node,
    const int32_t *trie_row_ptr, const int32_t *trie_child_token, const int32_t *trie_child_node,
    int32_t num_nodes, int32_t per_beam_k, void *workspace, size_t workspace_bytes,
    int32_t *out_parent, int32_t *out_token, float *out_score, int32_t *out_node,
    uint32_t *out_visited);

#ifdef __cplusplus
}
#endif
#endif /* RECACHE_SHIM_H */
