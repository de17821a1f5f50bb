"""Pool rows of the item pool's GPU path (``paged_kv``): per layer one K and one V tensor
``[capacity, H, D]`` (the scatter kernel's source layout) and the entries as slot ranges,
allocated first fit and merged on free. Pinned host memory for the arena a GPU engine reads
over PCIe, device memory for the device tier (``device_tier``), plain tensors in tests."""

from __future__ import annotations

import torch


class ItemArena:
    """Pool rows of every layer; entries are ranges of slots (first fit, merged on free)."""

    def __init__(self, layers: list[str], heads: int, dim: int, dtype, capacity: int, pin: bool,
                 device=None):
        self.layers, self.capacity = list(layers), capacity
        self.row_bytes = heads * dim * torch.empty(0, dtype=dtype).element_size()
        # Allocated pinned in place (a pageable copy first would double a GB-sized pool).
        make = (lambda: torch.empty(capacity, heads, dim, dtype=dtype, pin_memory=True)) if pin \
            else (lambda: torch.zeros(capacity, heads, dim, dtype=dtype, device=device))
        self.k = {n: make() for n in self.layers}
        self.v = {n: make() for n in self.layers}
        self.free: list[tuple[int, int]] = [(0, capacity)]  # (start, length), by start
        self.entries: dict[str, tuple[int, int]] = {}

    def entry_bytes(self, n: int) -> int:
        return 2 * n * self.row_bytes * len(self.layers)

    def alloc(self, n: int) -> int | None:
        for i, (s, length) in enumerate(self.free):
            if length >= n:
                self.free[i] = (s + n, length - n)
                if self.free[i][1] == 0:
                    self.free.pop(i)
                return s
        return None

    def release(self, start: int, n: int) -> None:
        self.free.append((start, n))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for s, length in self.free:
            if merged and merged[-1][0] + merged[-1][1] == s:
                merged[-1] = (merged[-1][0], merged[-1][1] + length)
            else:
                merged.append((s, length))
        self.free = merged

    def drop(self, key: str) -> bool:
        hit = self.entries.pop(key, None)
        if hit is not None:
            self.release(*hit)
        return hit is not None

    def clear(self) -> None:
        self.entries.clear()
        self.free = [(0, self.capacity)]
