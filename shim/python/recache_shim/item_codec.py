"""How the item pool keeps an entry's K/V in host memory (``kv_connector_extra_config.pool_codec``).

- ``bf16`` (default): the engine's own rows, unchanged.
- ``int8``: each row of one token and one KV head as int8 with its own fp16 scale (symmetric,
  absolute maximum / 127): ``head_dim + 2`` bytes where bf16 takes ``2 * head_dim``, so a pool
  of the same bytes holds about twice the items (1.97x at head_dim 128). Rows are decoded back
  to the engine's dtype when loaded, before re-rotation; the error is at most half a step of
  the row's own scale (``item_pool_check.py --codec int8`` measures what it does to scores).

Only the CPU path's host pool uses a codec; the GPU arena (``paged_kv``) and the store keep
the engine's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CODECS = ("bf16", "int8")


@dataclass
class Int8Rows:
    """``q`` [n, heads, dim] int8 and ``scale`` [n, heads, 1] fp16; decodes to ``dtype``."""

    q: torch.Tensor
    scale: torch.Tensor
    dtype: torch.dtype

    @property
    def shape(self) -> torch.Size:
        return self.q.shape

    def nbytes(self) -> int:
        return self.q.numel() * self.q.element_size() + self.scale.numel() * self.scale.element_size()

    def rows(self, off: int, n: int) -> torch.Tensor:
        q, s = self.q[off:off + n], self.scale[off:off + n]
        return (q.to(torch.float32) * s.to(torch.float32)).to(self.dtype)


def encode(t: torch.Tensor, codec: str):
    """``t`` [n, heads, dim] in the engine's dtype, kept as ``codec`` says."""
    if codec == "bf16":
        return t
    if codec != "int8":
        raise ValueError(f"unknown pool_codec {codec!r} (one of {', '.join(CODECS)})")
    x = t.to(torch.float32)
    # A row of zeros keeps scale 1 (any scale decodes it to zeros); fp16 keeps the scale's
    # 11 significant bits, far finer than the int8 step it scales.
    amax = x.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax)).to(torch.float16)
    q = torch.round(x / scale.to(torch.float32)).clamp_(-127, 127).to(torch.int8)
    return Int8Rows(q, scale, t.dtype)


def rows(kept, off: int, n: int) -> torch.Tensor:
    """Rows ``off .. off + n`` of what ``encode`` kept, in the engine's dtype."""
    return kept.rows(off, n) if isinstance(kept, Int8Rows) else kept[off:off + n]


def nbytes(kept) -> int:
    return kept.nbytes() if isinstance(kept, Int8Rows) else kept.numel() * kept.element_size()
