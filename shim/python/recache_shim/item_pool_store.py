"""Host-memory item KV pool and the slot I/O of vLLM's CPU paged KV cache (torch only).

Owns: the pool's entries (per item: the segment's token ids and one K and one V tensor per
layer, ``[tokens, kv_heads, head_dim]``, or those rows as ``item_codec`` keeps them), its byte
accounting, and reading/writing token rows
of a CPU attention layer's cache.

Why a probe: vLLM's CPU attention (0.32) does not store K token-major; ``vec``/``vec16``
transpose K inside a block and ``amx`` packs both K and V. Writing therefore goes through the
engine's own ``cpu_attn_reshape_and_cache`` (any ISA), and reading uses a gather map learned
once by writing known values with that same op and finding where they landed. The map is
verified with random values before the pool is enabled; a mismatch disables the pool (every
request is then computed by the engine, never served wrong KV).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import item_codec


def split_kv(kv_layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V views of one CPU attention layer's cache ``[blocks, heads, block, 2*D]``."""
    nb, heads, bs, _ = kv_layer.shape
    kv = kv_layer.view(nb, heads, bs * 2, -1)
    k, v = kv.chunk(2, dim=2)
    return k, v


class SlotIO:
    """Reads and writes token rows of a CPU paged KV cache layer through one ISA's layout."""

    def __init__(self, write_op, isa: str, heads: int, block_size: int, head_dim: int,
                 dtype: torch.dtype):
        self.write_op, self.isa = write_op, isa
        self.heads, self.bs, self.dim, self.dtype = heads, block_size, head_dim, dtype
        self.k_map = self._probe(0)
        self.v_map = self._probe(1)

    def _write(self, k, v, kc, vc, slots):
        self.write_op(k, v, kc, vc, slots, self.isa, k_scale=1.0, v_scale=1.0,
                      kv_cache_dtype="auto")

    def _probe(self, which: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(head, row, col) coordinates in a block view of every (token, head, dim) value."""
        h, bs, d = self.heads, self.bs, self.dim
        coords = []
        # Small integers are exact in bf16/fp16 (< 256), so each pass tags one coordinate.
        for tag in range(3):
            kv = torch.zeros(1, h, 2 * bs, d, dtype=self.dtype)
            kc, vc = kv.chunk(2, dim=2)
            t = torch.arange(bs).view(bs, 1, 1).expand(bs, h, d)
            hh = torch.arange(h).view(1, h, 1).expand(bs, h, d)
            dd = torch.arange(d).view(1, 1, d).expand(bs, h, d)
            val = (t, hh, dd)[tag].to(torch.float32) + 1.0
            if val.max() >= 256:
                raise RuntimeError(f"layout probe cannot tag {val.max():.0f} values exactly")
            val = val.to(self.dtype)
            zero = torch.zeros_like(val)
            self._write(val if which == 0 else zero, zero if which == 0 else val, kc, vc,
                        torch.arange(bs))
            coords.append((kc if which == 0 else vc)[0].to(torch.float32) - 1.0)
        tok, head, dim = coords
        if not (tok >= 0).all():
            raise RuntimeError("layout probe: some cache positions were not written")
        idx = (tok * h + head) * d + dim  # flat (token, head, dim) index per cache position
        inv = torch.empty(bs * h * d, dtype=torch.long)
        pos = torch.arange(idx.numel())
        inv[idx.round().long().flatten()] = pos
        # pos enumerates the block view [h, bs, d] in row-major order.
        ph = inv // (bs * d)
        pr = (inv // d) % bs
        pc = inv % d
        shape = (bs, h, d)
        return ph.view(shape), pr.view(shape), pc.view(shape)

    def read(self, kc: torch.Tensor, vc: torch.Tensor, slots: torch.Tensor):
        """K and V ``[n, heads, dim]`` of the tokens at ``slots``."""
        b = (slots // self.bs).view(-1, 1, 1)
        o = slots % self.bs
        out = []
        for cache, (ph, pr, pc) in ((kc, self.k_map), (vc, self.v_map)):
            out.append(cache[b, ph[o], pr[o], pc[o]].clone())
        return out[0], out[1]

    def write(self, kc, vc, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        self._write(k.contiguous(), v.contiguous(), kc, vc, slots)

    def verify(self) -> None:
        """Round trip of random rows at odd slots; raises if reading does not undo writing."""
        g = torch.Generator().manual_seed(0)
        n = self.bs + 7
        kv = torch.zeros(3, self.heads, 2 * self.bs, self.dim, dtype=self.dtype)
        kc, vc = kv.chunk(2, dim=2)
        k = torch.randn(n, self.heads, self.dim, generator=g).to(self.dtype)
        v = torch.randn(n, self.heads, self.dim, generator=g).to(self.dtype)
        slots = torch.arange(n) + 5
        self.write(kc, vc, slots, k, v)
        rk, rv = self.read(kc, vc, slots)
        if not (torch.equal(rk, k) and torch.equal(rv, v)):
            raise RuntimeError(f"slot read/write round trip failed for isa {self.isa}")


@dataclass
class Entry:
    tokens: tuple[int, ...]
    k: dict[str, torch.Tensor] = field(default_factory=dict)  # layer -> [n, heads, dim]
    v: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(item_codec.nbytes(t) for t in (*self.k.values(), *self.v.values()))

    def encoded(self, codec: str) -> "Entry":
        """This entry with every layer kept as ``codec`` says (itself for ``bf16``)."""
        if codec == "bf16":
            return self
        enc = lambda d: {name: item_codec.encode(t, codec) for name, t in d.items()}  # noqa: E731
        return Entry(self.tokens, enc(self.k), enc(self.v))


class PoolStore:
    """The worker's entries, keyed by item key (``model/item``)."""

    def __init__(self):
        self.entries: dict[str, Entry] = {}

    def put(self, key: str, entry: Entry) -> None:
        self.entries[key] = entry

    def drop(self, key: str) -> bool:
        return self.entries.pop(key, None) is not None

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values())
