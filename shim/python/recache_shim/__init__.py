"""recache engine plugin.

Kernel loading lives in :mod:`recache_shim.kernels`; the vLLM entry point in
:mod:`recache_shim.plugin` (a later issue adds eviction steering there, in its
own module). Importing this package never touches CUDA.
"""

from .kernels import (
    beam_topk,
    item_kv_scatter,
    kernels_available,
    unavailable_reason,
)
from .plugin import register

__all__ = [
    "beam_topk",
    "item_kv_scatter",
    "kernels_available",
    "register",
    "unavailable_reason",
]
