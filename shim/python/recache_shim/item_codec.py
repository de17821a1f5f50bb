"""How the item pool keeps an entry's K/V in host memory (``kv_connector_extra_config.pool_codec``).

- ``bf16`` (default): the engine's own rows, unchanged.
- ``int8``: each row of one token and one KV head as int8 with its own fp16 scale (symmetric,
  absolute maximum / 127): ``head_dim + 2`` bytes where bf16 takes ``2 * head_dim``, so a pool
  of the same bytes holds about twice the items (1.97x at head_dim 128).
- ``int4``: each group of 32 values of a row as 4-bit integers (-7..7, two to a byte) with
  the group's fp16 scale (absolute maximum / 7): ``head_dim / 2 + head_dim / 16`` bytes, 3.56x
  the items of bf16 at head_dim 128, at a coarser step.

Rows are decoded back to the engine's dtype when loaded, before re-rotation; the error is at
most half a step of the row's (group's) own scale. What it does to scores is measured on the
live engine (``item_pool_check.py``, the engine test) and on the trained ranker
(docs/ranking.md).

Only the CPU path's host pool uses a codec; the GPU arena (``paged_kv``) and the store keep
the engine's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

CODECS = ("bf16", "int8", "int4")

# Values per int4 scale.
GROUP = 32


@dataclass
class Int8Rows:
    """``q`` [n, heads, dim] int8 and ``scale`` [n, heads, 1] fp16; decodes to ``dtype``."""

    q: torch.Tensor
    scale: torch.Tensor
    dtype: torch.dtype

    def nbytes(self) -> int:
        return self.q.numel() + self.scale.numel() * self.scale.element_size()

    def rows(self, off: int, n: int) -> torch.Tensor:
        q, s = self.q[off:off + n], self.scale[off:off + n]
        return (q.to(torch.float32) * s.to(torch.float32)).to(self.dtype)


@dataclass
class Int4Rows:
    """``q`` [n, heads, dim / 2] uint8 (two values, offset by 8, per byte) and ``scale``
    [n, heads, dim / GROUP, 1] fp16; decodes to ``dtype``."""

    q: torch.Tensor
    scale: torch.Tensor
    dtype: torch.dtype

    def nbytes(self) -> int:
        return self.q.numel() + self.scale.numel() * self.scale.element_size()

    def rows(self, off: int, n: int) -> torch.Tensor:
        q, s = self.q[off:off + n], self.scale[off:off + n]
        lo = (q & 0x0F).to(torch.int8) - 8
        hi = (q >> 4).to(torch.int8) - 8
        x = torch.stack((lo, hi), dim=-1).flatten(-2).to(torch.float32)
        g = x.unflatten(-1, (s.shape[-2], -1)) * s.to(torch.float32)
        return g.flatten(-2).to(self.dtype)


def _int4(t: torch.Tensor) -> Int4Rows:
    x = t.to(torch.float32)
    if x.shape[-1] % GROUP:
        raise ValueError(f"pool_codec int4 needs head_dim a multiple of {GROUP}, not {x.shape[-1]}")
    g = x.unflatten(-1, (x.shape[-1] // GROUP, GROUP))
    amax = g.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 7.0, torch.ones_like(amax)).to(torch.float16)
    q = (torch.round(g / scale.to(torch.float32)).clamp_(-7, 7) + 8).to(torch.uint8).flatten(-2)
    return Int4Rows(q[..., 0::2] | (q[..., 1::2] << 4), scale, t.dtype)


def _int8(t: torch.Tensor) -> Int8Rows:
    x = t.to(torch.float32)
    # A row of zeros keeps scale 1 (any scale decodes it to zeros); fp16 keeps the scale's
    # 11 significant bits, far finer than the int8 step it scales.
    amax = x.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax)).to(torch.float16)
    q = torch.round(x / scale.to(torch.float32)).clamp_(-127, 127).to(torch.int8)
    return Int8Rows(q, scale, t.dtype)


def encode(t: torch.Tensor, codec: str):
    """``t`` [n, heads, dim] in the engine's dtype, kept as ``codec`` says."""
    if codec not in CODECS:
        raise ValueError(f"unknown pool_codec {codec!r} (one of {', '.join(CODECS)})")
    return {"bf16": lambda x: x, "int8": _int8, "int4": _int4}[codec](t)


def rows(kept, off: int, n: int) -> torch.Tensor:
    """Rows ``off .. off + n`` of what ``encode`` kept, in the engine's dtype."""
    return kept.rows(off, n) if isinstance(kept, (Int8Rows, Int4Rows)) else kept[off:off + n]


def gather(parts) -> torch.Tensor:
    """The rows of every ``(kept, off, n)`` in order, in the engine's dtype: one decode for
    all of them where they share a codec (a request loads ~100 items a layer; decoding each
    alone tripled a pooled request's load time)."""
    kinds = {type(kept) for kept, _, _ in parts}
    kind = kinds.pop() if len(kinds) == 1 else None
    if kind in (Int8Rows, Int4Rows):
        q = torch.cat([kept.q[off:off + n] for kept, off, n in parts])
        scale = torch.cat([kept.scale[off:off + n] for kept, off, n in parts])
        return kind(q, scale, parts[0][0].dtype).rows(0, q.shape[0])
    return torch.cat([rows(kept, off, n) for kept, off, n in parts])


def nbytes(kept) -> int:
    if isinstance(kept, (Int8Rows, Int4Rows)):
        return kept.nbytes()
    return kept.numel() * kept.element_size()
