"""The item pool on vLLM 0.32's GPU KV caches: layout, pool rows, loads and fills.

Owns everything the connector (``item_pool``) needs beyond the CPU attention backend:

- **Layout.** vLLM 0.32 gives every attention layer one logical ``[blocks, heads, tokens,
  2*D]`` view (K in the first ``D`` of each head's content, V in the second) whose physical
  stride order is the resolved ``KVCacheLayout`` (``LBNHC`` by default, ``LBHNC`` for
  FlashInfer's HND, block-outer orders too). :func:`kv_views` takes K and V exactly as
  FlashAttention does (``kv.transpose(1, 2).split(D, -1)``) and checks what the scatter kernel
  needs (head vector contiguous, strides multiples of 8, fp16/bf16); shapes and strides are
  read from the engine's tensors, never assumed.
- **Pool rows** (:class:`ItemArena`): per layer one K and one V tensor ``[capacity, H, D]``
  (the kernel's source layout), in pinned host memory when the cache is on a GPU; an entry is a
  slot range. Pinned memory is mapped into the device's address space (UVA), so the scatter
  kernel reads pooled rows over PCIe itself: no staging copy, the H2D transfer *is* the kernel.
- **Loads** (:class:`PagedBackend`): one scatter launch per layer on a side stream, an event
  per layer; the connector's ``wait_for_layer_load`` makes the forward wait only for its own
  layer, so later layers' loads overlap earlier layers' compute. Each layer's launch goes
  through a :class:`~recache_shim.kernels.ScatterPlan` made once per layer (validating the
  views and building the pointer tables per launch cost more than the kernel). K is
  re-rotated by RoPE when a segment's target position differs from the position it was
  computed at (``pos`` in the request's segments; 0, the shared start, by default).
- **Device tier** (:class:`DeviceTier`, ``device_tier_bytes``): the hottest entries (BAT's
  frequency per byte over recent loads) also in GPU memory, loaded in one launch for every
  layer on the forward's stream before it starts; promotions are copied on the side stream.
- **Fills**: the finished fill's rows are gathered from the engine's blocks into its arena range
  (device-to-host copies on the current stream, synchronised before the commit is reported).

On CPU tensors (tests) the same code runs through the kernel's CPU reference
(``recache_item_kv_scatter_host``), so the layout arithmetic is checked in CI without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import kernels
from .arena import ItemArena
from .device_tier import DeviceTier

try:  # the engine's logger when vLLM is there (the connector), else the stdlib's
    from vllm.logger import init_logger

    logger = init_logger(__name__)
except ImportError:  # pragma: no cover
    import logging

    logger = logging.getLogger(__name__)


class LayoutError(RuntimeError):
    """The engine's cache is not a layout the scatter kernel can write."""


@dataclass(frozen=True)
class RopeSpec:
    rotary_dim: int
    theta: float
    neox: bool = True

    @classmethod
    def from_hf(cls, hf_config, head_dim: int) -> "RopeSpec":
        params = getattr(hf_config, "rope_parameters", None) or {}
        theta = getattr(hf_config, "rope_theta", None) or params.get("rope_theta") or 10000.0
        factor = getattr(hf_config, "partial_rotary_factor", None) or params.get(
            "partial_rotary_factor", 1.0)
        return cls(int(head_dim * float(factor)), float(theta))


def rope_shift(k: torch.Tensor, delta: int, rope: RopeSpec) -> torch.Tensor:
    """K rows ``[n, H, D]`` rotated by ``delta`` positions (fp32 math, NeoX or GPT-J pairs);
    the CPU attention path's re-rotation and the tests' oracle."""
    if delta == 0:
        return k
    r = rope.rotary_dim
    inv = torch.tensor([rope.theta ** (-2.0 * i / r) for i in range(r // 2)], dtype=torch.float64)
    ang = (delta * inv.to(torch.float32)).to(torch.float64)
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
    x = k.float().clone()
    if rope.neox:
        a, b = x[..., : r // 2].clone(), x[..., r // 2: r].clone()
        x[..., : r // 2], x[..., r // 2: r] = a * cos - b * sin, b * cos + a * sin
    else:
        a, b = x[..., 0:r:2].clone(), x[..., 1:r:2].clone()
        x[..., 0:r:2], x[..., 1:r:2] = a * cos - b * sin, b * cos + a * sin
    out = x.to(k.dtype)
    out[..., r:] = k[..., r:]
    return out


def kv_views(kv: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V ``[blocks, tokens, heads, D]`` views of one layer's vLLM 0.32 cache, taken the
    way FlashAttention takes them; raises :class:`LayoutError` naming what does not fit."""
    if kv.dim() != 4:
        raise LayoutError(f"cache view has {kv.dim()} dims; want vLLM 0.32's [B, H, N, 2*D]")
    if kv.shape[3] != 2 * head_dim:
        raise LayoutError(f"content {kv.shape[3]} is not K+V of head_dim {head_dim} "
                          "(quantised or MLA caches are not supported)")
    if kv.dtype not in (torch.float16, torch.bfloat16):
        raise LayoutError(f"KV dtype {kv.dtype}: the scatter kernel moves fp16/bf16 only")
    if kv.stride(3) != 1 or head_dim % 8:
        raise LayoutError(f"head vector not contiguous or head_dim {head_dim} % 8 != 0")
    k, v = kv.transpose(1, 2).split(head_dim, dim=-1)
    bad = [s for s in k.stride()[:3] if s % 8 or s < head_dim]
    if bad or kv.data_ptr() % 16:
        raise LayoutError(f"strides {k.stride()} / base not 16-byte aligned for the kernel")
    return k, v


class PagedBackend:
    """Loads into and fills from vLLM 0.32 paged caches through the scatter kernel."""

    def __init__(self, kvs: dict[str, torch.Tensor], head_dim: int, rope: RopeSpec | None,
                 pool_bytes: int, tier_bytes: int = 0, tier_every: int = 64):
        self.names = list(kvs)
        self.views = {n: kv_views(kv, head_dim) for n, kv in kvs.items()}
        k0 = self.views[self.names[0]][0]
        self.block_size, self.heads, self.dim = k0.shape[1], k0.shape[2], head_dim
        self.device, self.rope = k0.device, rope
        self.cuda = self.device.type == "cuda"
        row = 2 * self.heads * head_dim * k0.element_size() * len(self.names)
        self.arena = ItemArena(self.names, self.heads, head_dim, k0.dtype,
                               max(1, pool_bytes // row), pin=self.cuda)
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.events: dict[str, object] = {}
        self.plans = {n: kernels.ScatterPlan([self.arena.k[n]], [self.arena.v[n]],
                                             [self.views[n][0]], [self.views[n][1]])
                      for n in self.names}
        self.pending: dict[str, tuple[int, int]] = {}  # req_id -> arena range of a fill
        self.tier = DeviceTier(self, tier_bytes // row, tier_every) if tier_bytes >= row else None

    def _segments(self, loads, tier: bool = False):
        """Kernel arguments of one step's loads from the host arena (or, ``tier``, from the
        device tier): per part a segment, its slots concatenated; None when there are none."""
        src, lens, pos, slots = [], [], [], []
        for op in loads:
            run = 0  # a load's slots list its parts' tokens in order
            for key, off, n, p in op.parts:
                hit = self.arena.entries.get(key)
                if hit is None:
                    raise RuntimeError(f"recache item pool: scheduler claimed missing {key}")
                if p and self.rope is None:
                    raise RuntimeError("recache item pool: re-rotation needs the model's RoPE")
                in_tier = self.tier.entries.get(key) if self.tier else None
                if (in_tier is not None) == tier:
                    src.append((in_tier or hit)[0] + off)
                    lens.append(n)
                    # Entry token j was computed at position j and lands at p + j: every token
                    # of the part shifts by p. The kernel shifts by dst_pos - stored_pos (0).
                    pos.append(p)
                    slots.extend(op.slots[run:run + n])
                run += n
        if not src:
            return None
        offs, run = [], 0
        for n in lens:
            offs.append(run)
            run += n
        i32, i64 = dict(dtype=torch.int32), dict(dtype=torch.int64)
        host = [torch.tensor(src, **i64), torch.tensor(lens, **i32), torch.tensor(offs, **i32),
                torch.tensor(pos, **i32), torch.tensor(slots, **i64)]
        if not self.cuda:
            return host
        return [t.pin_memory().to(self.device, non_blocking=True) for t in host]

    def load(self, loads) -> None:
        """Launch this step's loads (CPU: done now): the device tier's in one launch for every
        layer on the forward's stream, before the forward; the host arena's one launch and one
        event per layer on the side stream, so layer l's forward waits only for its own."""
        if not loads:
            return
        rope = self.rope or RopeSpec(self.dim, 10000.0)
        if self.tier is not None:
            for op in loads:
                for key, _, n, _ in op.parts:
                    self.tier.touch(key, n)
            segs = self._segments(loads, tier=True)
            if segs is not None:
                self.tier.launch(segs, rope)
        stream = None
        if self.cuda:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            stream = self.stream.cuda_stream
            with torch.cuda.stream(self.stream):  # the side stream owns the argument tensors
                segs = self._segments(loads)
        else:
            segs = self._segments(loads)
        if segs is None:
            return
        for name in self.names:
            self.plans[name].launch(*segs, stored_pos=0, rotary_dim=rope.rotary_dim,
                                    rope_theta=rope.theta, neox=rope.neox, stream=stream)
            if self.cuda:
                ev = torch.cuda.Event()
                ev.record(self.stream)
                self.events[name] = ev

    def wait_layer(self, name: str) -> None:
        ev = self.events.pop(name, None)
        if ev is not None:
            torch.cuda.current_stream(self.device).wait_event(ev)

    def wait_all(self) -> None:
        for name in list(self.events):
            self.wait_layer(name)

    def capture(self, name: str, stores) -> None:
        """Copies each finished fill's rows of layer ``name`` into its arena range (allocated
        at the first layer; a fill that finds no room is logged and not stored)."""
        k, v = self.views[name]
        for op in stores:
            if op.req_id not in self.pending and name == self.names[0]:
                start = self.arena.alloc(len(op.slots))
                if start is None:
                    logger.warning("recache item pool: no room for %s (%d tokens) in the "
                                   "arena; not stored", op.key, len(op.slots))
                    continue
                self.pending[op.req_id] = (start, len(op.slots))
            hit = self.pending.get(op.req_id)
            if hit is None:
                continue
            start, n = hit
            sl = torch.tensor(op.slots, dtype=torch.long, device=self.device)
            b, o = sl // self.block_size, sl % self.block_size
            self.arena.k[name][start:start + n].copy_(k[b, o], non_blocking=self.cuda)
            self.arena.v[name][start:start + n].copy_(v[b, o], non_blocking=self.cuda)

    def commit(self, stores, evict, clear: bool) -> list[tuple[str, str, int]]:
        """End of a step: loads waited for, the scheduler's evictions applied, this step's
        fills committed once their copies are complete. Returns ``(req_id, key, bytes)`` of
        each stored entry (the worker metadata the scheduler commits from)."""
        self.wait_all()
        if clear:
            self.arena.clear()
            if self.tier:
                self.tier.clear()
        for key in evict:
            self.arena.drop(key)
            if self.tier:
                self.tier.drop(key)
        if stores:
            self.settle()  # only steps with fills wait for their copies
        out = []
        for op in stores:
            hit = self.pending.pop(op.req_id, None)
            if hit is None:
                continue
            self.arena.drop(op.key)  # a newer copy replaces the old one
            if self.tier:
                self.tier.drop(op.key)
            self.arena.entries[op.key] = hit
            out.append((op.req_id, op.key, self.arena.entry_bytes(hit[1])))
        for hit in self.pending.values():  # captured but not in this step's stores
            self.arena.release(*hit)
        self.pending.clear()
        if self.tier:
            self.tier.maybe_rebalance()
        return out

    def settle(self) -> None:
        """Fills' device-to-host copies are complete (before their commits are reported)."""
        if self.cuda:
            torch.cuda.current_stream(self.device).synchronize()


