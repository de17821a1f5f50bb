"""Stand-in for SGLang's `sgl_kernel` CPU ops: a test-bed necessity, never shipped to engines.

Owns the two CPU ops SGLang 0.5.23's CPU engine (`SGLANG_USE_CPU_ENGINE=1`) imports from
`sgl_kernel` at start-up for a dense model. Every `sgl_kernel`/`sglang-kernel` wheel on PyPI
is a GPU build that fails to import without libcuda, and no CPU build is published, so the
testbed uninstalls it and `examples/testbed/launch.py` puts this directory on PYTHONPATH of
the SGLang server it starts (nowhere else). Written in plain torch from the ops' contracts
(see /work/shared/notes/engines.md): slow, but the tiny testbed model does not notice.

Without `torch.ops.sgl_kernel.convert_weight_packed` (this module registers no torch ops)
SGLang takes its plain-torch paths for everything else. Do not install this into a real
engine: there, the real `sgl_kernel` provides these ops.
"""
import ctypes

import torch

__version__ = "0.0.0+recache-testbed-stub"


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset,
                                 out_cache_loc, pool_len):
    """Writes each request's new KV locations into its row of `req_to_token`.

    Request i gets `end_offset[i] - start_offset[i]` locations, taken from `out_cache_loc`
    in order, at columns `start_offset[i]:end_offset[i]` of row `req_pool_indices[i]`.
    """
    del pool_len  # the row length; slicing checks bounds already
    starts, ends = start_offset.tolist(), end_offset.tolist()
    rows = req_pool_indices.tolist()
    pos = 0
    for row, start, end in zip(rows, starts, ends):
        n = end - start
        if n <= 0:
            continue
        req_to_token[row, start:end] = out_cache_loc[pos:pos + n].to(req_to_token.dtype)
        pos += n


def _byte_rows(ptr, stride, rows):
    """A uint8 tensor viewing `rows` rows of `stride` bytes at address `ptr` (no copy)."""
    buf = (ctypes.c_uint8 * (stride * rows)).from_address(ptr)
    return torch.frombuffer(buf, dtype=torch.uint8).view(rows, stride)


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """For every layer buffer (raw address + row stride in bytes), copies rows `src_loc` to
    rows `tgt_loc` (all sources are read before any target is written)."""
    if src_loc.numel() == 0:
        return
    src, tgt = src_loc.long(), tgt_loc.long()
    rows = int(max(src.max().item(), tgt.max().item())) + 1
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        view = _byte_rows(int(ptr), int(stride), rows)
        view[tgt] = view[src].clone()


def __getattr__(name):
    """Any other op: importable (SGLang's CPU modules import GPU-tree, speculative and
    quantization ops at start-up), but raises when called: the testbed's dense model never
    reaches them, and a call would mean a path the stand-in does not cover."""
    if name.startswith("__"):
        raise AttributeError(name)

    def unavailable(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name} is not in recache's testbed stand-in (examples/testbed/"
            "sgl_kernel_stub): only assign_req_to_token_pool_cpu and "
            "copy_all_layer_kv_cache_cpu are")

    unavailable.__name__ = name
    return unavailable
