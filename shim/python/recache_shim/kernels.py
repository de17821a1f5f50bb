"""Thin torch wrappers over the shim's C ABI (see shim/include/recache_shim.h).

Tensors stay on the GPU: the wrappers pass ``data_ptr()``s, shapes and the
current stream (``torch.cuda.current_stream().cuda_stream``) and the kernels
are enqueued on it. Shape rules and tolerances: kernels/README.md.
"""

import ctypes
from typing import List, Optional, Sequence, Tuple

from . import _lib

_availability: dict = {}


def kernels_available(device: int = 0) -> bool:
    """True if the kernels can run on CUDA device ``device``.

    The first call per device loads the driver and compiles the kernels
    (NVRTC, about a second). Never raises. Call it in the process that will
    launch kernels (an engine worker), not before the engine forks.
    """
    if device not in _availability:
        lib, err = _lib.load()
        if lib is None:
            _availability[device] = err
        else:
            status = lib.recache_shim_kernels_available(device)
            _availability[device] = None if status == 0 else _lib.last_error(lib)
    return _availability[device] is None


def unavailable_reason(device: int = 0) -> Optional[str]:
    """Why :func:`kernels_available` is False (None when available)."""
    kernels_available(device)
    return _availability[device]


def _torch():
    import torch  # imported lazily: the package must import without torch

    return torch


def _ready(device: int):
    if not kernels_available(device):
        raise RuntimeError(f"recache kernels unavailable: {unavailable_reason(device)}")
    lib, _ = _lib.load()
    return lib


_DTYPES = {"float16": 0, "bfloat16": 1}


class ScatterPlan:
    """One set of pool tensors and cache views, validated once, launched many times.

    ``src_k[l]``/``src_v[l]``: ``[num_src_slots, H, D]`` contiguous item pool of
    layer ``l``. ``dst_k[l]``/``dst_v[l]``: views ``[num_blocks, block_size, H, D]``
    of the engine's cache with the head vector contiguous and any other strides
    (the kernel takes the view's block, token and head strides), e.g. the
    ``kv.transpose(1, 2).split(D, -1)`` views vLLM 0.32's FlashAttention reads;
    every layer's views share one shape and stride set.

    Why a plan: checking 4 tensors per layer and building the pointer tables costs
    ~100 us of Python for a 28-layer model, more than the kernel takes for a
    100-item request; a connector's pools and views are fixed, so it pays that once.
    The tensors must stay alive (and unmoved) as long as the plan is used.
    """

    def __init__(self, src_k: Sequence, src_v: Sequence, dst_k: Sequence, dst_v: Sequence):
        k0 = dst_k[0]
        n = len(src_k)
        if not (len(src_v) == len(dst_k) == len(dst_v) == n):
            raise ValueError("src_k, src_v, dst_k, dst_v need one tensor per layer")
        if k0.dim() != 4:
            raise ValueError(f"dst views must be [blocks, block_size, H, D]; got {tuple(k0.shape)}")
        num_blocks, block_size, heads, head_dim = k0.shape
        strides = k0.stride()
        if strides[3] != 1:
            raise ValueError(f"dst head vectors must be contiguous; strides {strides}")
        for t in (*dst_k, *dst_v):
            if t.shape != k0.shape or t.stride() != strides or t.dtype != k0.dtype:
                raise ValueError("every layer's K and V views need one shape, stride set and dtype")
        for t in (*src_k, *src_v):
            if t.dim() != 3 or t.shape[1:] != (heads, head_dim) or not t.is_contiguous():
                raise ValueError(f"pool rows must be contiguous [slots, {heads}, {head_dim}]")
        self.dtype = _DTYPES.get(str(k0.dtype).replace("torch.", ""))
        if self.dtype is None:
            raise ValueError(f"unsupported KV dtype {k0.dtype}; want float16 or bfloat16")
        lib, err = _lib.load()
        if lib is None:
            raise RuntimeError(f"recache shim library unavailable: {err}")
        self.lib, self.layers, self.device = lib, n, k0.device
        self.cpu = k0.device.type == "cpu"
        if not self.cpu:
            self.lib = _ready(k0.device.index or 0)
        arr = ctypes.c_uint64 * n
        self.tables = [arr(*[t.data_ptr() for t in ts]) for ts in (src_k, src_v, dst_k, dst_v)]
        self.shape = (heads, head_dim, src_k[0].shape[0], num_blocks * block_size, block_size,
                      strides[0], strides[1], strides[2])

    def launch(self, seg_src_slot, seg_len, seg_tok_offset, seg_dst_pos, slot_mapping, *,
               stored_pos: int, rotary_dim: int, rope_theta: float, neox: bool = True,
               stream: Optional[int] = None) -> None:
        """Enqueue one scatter (CUDA: on ``stream``, default the current stream; CPU: run
        the kernel's CPU reference now). Segment tensors are int64 (``seg_src_slot``) /
        int32, ``slot_mapping`` int64 (-1 skips a token)."""
        segs = (seg_len.numel(), seg_src_slot.data_ptr(), seg_len.data_ptr(),
                seg_tok_offset.data_ptr(), seg_dst_pos.data_ptr(), slot_mapping.data_ptr(),
                slot_mapping.numel(), stored_pos, rotary_dim, rope_theta, 0 if neox else 1)
        if self.cpu:
            status = self.lib.recache_item_kv_scatter_host(
                self.dtype, self.layers, *self.tables, *self.shape, *segs)
        else:
            if stream is None:
                stream = _torch().cuda.current_stream(self.device).cuda_stream
            status = self.lib.recache_item_kv_scatter(
                self.device.index or 0, stream, self.dtype, self.layers, *self.tables,
                *self.shape, *segs)
        _lib.check(self.lib, status, "item_kv_scatter")


def item_kv_scatter(
    src_k: Sequence, src_v: Sequence, dst_k: Sequence, dst_v: Sequence,
    seg_src_slot, seg_len, seg_tok_offset, seg_dst_pos, slot_mapping,
    *, stored_pos: int, rotary_dim: int, rope_theta: float, neox: bool = True,
) -> None:
    """Copy item K/V segments into the paged cache with RoPE re-rotation (a one-off
    :class:`ScatterPlan`; see it for the tensor rules).

    CUDA tensors: enqueued on the current stream. CPU tensors: the kernel's CPU
    reference runs on them synchronously (tests and no-GPU fallback).
    """
    ScatterPlan(src_k, src_v, dst_k, dst_v).launch(
        seg_src_slot, seg_len, seg_tok_offset, seg_dst_pos, slot_mapping,
        stored_pos=stored_pos, rotary_dim=rotary_dim, rope_theta=rope_theta, neox=neox)


def beam_topk(
    log_probs, beam_scores, beam_node, trie: Tuple, *, per_beam_k: Optional[int] = None,
    workspace=None, count_visited: bool = False,
) -> List:
    """One constrained beam step. ``log_probs`` f32 ``[BW, V]`` (row stride
    may exceed V), ``beam_scores`` f32 ``[BW]``, ``beam_node`` int32 ``[BW]``,
    ``trie = (row_ptr, child_token, child_node)`` int32 CSR. Returns
    ``[parent, token, score, node]`` (``[BW]`` each) plus ``visited`` (a 1-element
    uint32-as-int32 tensor) when ``count_visited``."""
    torch = _torch()
    device = log_probs.device.index or 0
    lib = _ready(device)
    bw, vocab = log_probs.shape
    k = per_beam_k or bw
    row_ptr, child_token, child_node = trie
    need = lib.recache_beam_topk_workspace_bytes(bw, k)
    if workspace is None or workspace.numel() * workspace.element_size() < need:
        workspace = torch.empty(need, dtype=torch.uint8, device=log_probs.device)
    ints = dict(dtype=torch.int32, device=log_probs.device)
    parent, token, node = torch.empty(bw, **ints), torch.empty(bw, **ints), torch.empty(bw, **ints)
    score = torch.empty(bw, dtype=torch.float32, device=log_probs.device)
    visited = torch.zeros(1, **ints) if count_visited else None
    stream = torch.cuda.current_stream(log_probs.device).cuda_stream
    status = lib.recache_beam_topk(
        device, stream, log_probs.data_ptr(), bw, vocab, log_probs.stride(0),
        beam_scores.data_ptr(), beam_node.data_ptr(), row_ptr.data_ptr(), child_token.data_ptr(),
        child_node.data_ptr(), row_ptr.numel() - 1, k, workspace.data_ptr(), need,
        parent.data_ptr(), token.data_ptr(), score.data_ptr(), node.data_ptr(),
        visited.data_ptr() if visited is not None else None,
    )
    _lib.check(lib, status, "beam_topk")
    out = [parent, token, score, node]
    return out + [visited] if count_visited else out
