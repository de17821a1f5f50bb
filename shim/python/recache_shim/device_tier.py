"""The item pool's device tier (``kv_connector_extra_config`` ``device_tier_bytes``): the
hottest pooled entries also in GPU memory, for ``paged_kv.PagedBackend``."""

from __future__ import annotations

import torch

from . import kernels
from .arena import ItemArena


class DeviceTier:
    """The hottest pooled entries also in GPU memory (``tier_bytes`` of it, taken out of the
    engine's KV budget by whoever sizes the engine): loaded in one launch for every layer on the
    forward's stream, which costs far less than per-layer launches interleaved with the
    forward's GEMMs (docs/kernels-gpu.md). The host arena keeps every entry; the tier holds
    copies. Which entries: BAT's frequency-per-byte rule over recent loads (each load of an
    entry counts 1, halved at every rebalance, over its tokens), re-decided every
    ``every`` loads; promotions are copied from the host arena on the side stream and the next
    tier launch waits for them."""

    def __init__(self, backend: "PagedBackend", rows: int, every: int):
        self.b, self.every = backend, max(1, every)
        self.arena = ItemArena(backend.names, backend.heads, backend.dim,
                               backend.views[backend.names[0]][0].dtype, rows, pin=False,
                               device=backend.device)
        self.plan = kernels.ScatterPlan(
            [self.arena.k[n] for n in backend.names], [self.arena.v[n] for n in backend.names],
            [backend.views[n][0] for n in backend.names],
            [backend.views[n][1] for n in backend.names])
        self.heat: dict[str, float] = {}
        self.sizes: dict[str, int] = {}
        self.loads = 0
        self.tokens = 0  # tokens loaded from the tier since start
        self.ready = None  # CUDA event: promotions copied

    @property
    def entries(self):
        return self.arena.entries

    def touch(self, key: str, n: int) -> None:
        self.heat[key] = self.heat.get(key, 0.0) + 1.0
        self.sizes[key] = self.b.arena.entries.get(key, (0, n))[1]
        self.loads += 1

    def launch(self, segs, rope) -> None:
        if self.b.cuda and self.ready is not None:
            torch.cuda.current_stream(self.b.device).wait_event(self.ready)
            self.ready = None
        self.plan.launch(*segs, stored_pos=0, rotary_dim=rope.rotary_dim, rope_theta=rope.theta,
                         neox=rope.neox)
        self.tokens += int(segs[1].sum())

    def seed(self, hottest_first: list[str]) -> None:
        """Starts the heat from a ranking (a deployment's precompute order, most valuable
        first) and fills the tier from it now."""
        for r, k in enumerate(hottest_first):
            self.heat[k] = float(len(hottest_first) - r)
            self.sizes[k] = self.b.arena.entries.get(k, (0, 1))[1]
        self.loads = self.every
        self.maybe_rebalance()

    def drop(self, key: str) -> None:
        self.arena.drop(key)
        self.heat.pop(key, None)
        self.sizes.pop(key, None)

    def clear(self) -> None:
        self.arena.clear()
        self.heat.clear()
        self.sizes.clear()

    def maybe_rebalance(self) -> None:
        if self.loads < self.every:
            return
        self.loads = 0
        host = self.b.arena.entries
        ranked = sorted((k for k in self.heat if k in host),
                        key=lambda k: -self.heat[k] / max(self.sizes.get(k, 1), 1))
        want, room = [], self.arena.capacity
        for k in ranked:
            n = host[k][1]
            if n <= room:
                want.append(k)
                room -= n
        keep = set(want)
        for k in [k for k in self.arena.entries if k not in keep]:
            self.arena.drop(k)
        copy = []
        for k in want:
            if k in self.arena.entries:
                continue
            n = host[k][1]
            start = self.arena.alloc(n)
            if start is None:  # fragmented: try again at the next rebalance
                continue
            self.arena.entries[k] = (start, n)
            copy.append((host[k][0], start, n))
        for k in list(self.heat):
            self.heat[k] *= 0.5
            if self.heat[k] < 0.01:
                self.heat.pop(k)
                self.sizes.pop(k, None)
        if copy:
            self._copy(copy)

    def _copy(self, copy) -> None:
        merged: list[list[int]] = []  # adjacent in both arenas: one copy per layer, not many
        for src, dst, n in sorted(copy):
            if merged and merged[-1][0] + merged[-1][2] == src \
                    and merged[-1][1] + merged[-1][2] == dst:
                merged[-1][2] += n
            else:
                merged.append([src, dst, n])
        copy = merged
        b = self.b
        if b.cuda:  # after everything queued so far, off the forward's stream
            b.stream.wait_stream(torch.cuda.current_stream(b.device))
            with torch.cuda.stream(b.stream):
                self._rows(copy, non_blocking=True)
                self.ready = torch.cuda.Event()
                self.ready.record(b.stream)
        else:
            self._rows(copy, non_blocking=False)

    def _rows(self, copy, non_blocking: bool) -> None:
        for name in self.b.names:
            for src, dst, n in copy:
                self.arena.k[name][dst:dst + n].copy_(self.b.arena.k[name][src:src + n],
                                                      non_blocking=non_blocking)
                self.arena.v[name][dst:dst + n].copy_(self.b.arena.v[name][src:src + n],
                                                      non_blocking=non_blocking)
