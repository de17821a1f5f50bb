"""The item pool connector's scheduler-side bookkeeping (engine-core process): the residency
index (KEY -> token ids, bytes) that answers which leading run of a ranking's segments is
resident with the same token ids (and, with a store, which continue as cold parts), recache's
evictions and the budget's safety net, the cumulative counters, and each finished request's
report. No vLLM types, so it is testable on its own; ``item_pool.py`` is the connector.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from .item_cold_loads import cold_stats

logger = logging.getLogger("recache_shim.item_pool")


class SchedulerState:
    """The scheduler side's bookkeeping; no vLLM types, so it is testable on its own."""

    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self.index: OrderedDict[str, tuple[tuple[int, ...], int]] = OrderedDict()
        self.bytes = 0
        self.to_evict: list[str] = []
        self.clear = False
        self.stats = {"total_loaded_tokens": 0, "stores": 0, "evictions": 0,
                      "total_load_s": 0.0, "total_fill_s": 0.0, **cold_stats()}

    def evict(self, keys) -> None:
        for k in keys:
            if k in self.index:
                self.bytes -= self.index.pop(k)[1]
                self.stats["evictions"] += 1
            self.to_evict.append(k)

    def reset(self) -> None:
        self.index.clear()
        self.bytes = 0
        self.to_evict = []
        self.clear = True

    def match(self, prompt: list[int], segments, cold=(), cached: int = 0) -> tuple[int, list[tuple]]:
        """Leading run of resident segments: (end token, [(key, start, len, pos)]); a segment
        whose key is in ``cold`` and not resident with these tokens continues the run as a
        cold part ``(key, start, len, pos, its prompt tokens)``. The run starts at token 0 or,
        after a user prefix, where the first segment starts if that is at most ``cached`` (the
        engine's own prefix-cache hit: loaded tokens must continue what the engine holds)."""
        first = int(segments[0][1]) if segments else 0
        end, run = (first if 0 < first <= cached else 0), []
        for seg in segments:
            key, start, n = str(seg[0]), int(seg[1]), int(seg[2])
            pos = int(seg[3]) if len(seg) > 3 else 0
            hit = self.index.get(key)
            toks = tuple(prompt[start:start + n])
            if start != end or n <= 0 or len(toks) != n:
                break
            if hit is not None and hit[0] == toks:
                run.append((key, start, n, pos))
            elif key in cold:
                run.append((key, start, n, pos, toks))
            else:
                break
            end = start + n
        return end, run

    def committed(self, key: str, tokens: tuple[int, ...], nbytes: int) -> None:
        # A newer copy supersedes an eviction of the key that was not sent to the worker yet.
        self.to_evict = [k for k in self.to_evict if k != key]
        if key in self.index:
            self.bytes -= self.index.pop(key)[1]
        self.index[key] = (tokens, nbytes)
        self.bytes += nbytes
        self.stats["stores"] += 1
        while self.bytes > self.budget and len(self.index) > 1:
            old = next(iter(self.index))
            logger.warning("recache item pool over %d bytes: dropping %s", self.budget, old)
            self.evict([old])

    def touch(self, keys) -> None:
        for k in keys:
            if k in self.index:
                self.index.move_to_end(k)

    def worker_times(self, load_s: float, fill_s: float) -> None:
        """Adds a worker metadata's increments to the cumulative totals."""
        self.stats["total_load_s"] += max(0.0, float(load_s or 0.0))
        self.stats["total_fill_s"] += max(0.0, float(fill_s or 0.0))

    def listing(self) -> list[list]:
        """Every committed entry as ``[key, first token, tokens]`` (pending fills are not in
        the index until their commit arrives)."""
        return [[k, int(t[0]), len(t)] for k, (t, _) in self.index.items() if t]

    def report(self, keys: list[str], loaded_tokens: int, listing: bool = False) -> dict:
        """What a finished request gets back under ``kv_transfer_params.recache_pool``."""
        out = {
            "present": [k for k in keys if k in self.index],
            "loaded_tokens": loaded_tokens,
            "entries": len(self.index),
            "bytes": self.bytes,
            **self.stats,
        }
        if listing:
            out["list"] = self.listing()
        return out
