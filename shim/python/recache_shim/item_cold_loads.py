"""The connector's worker-side use of the cold tier (:class:`ColdLoads`): the entry layout
a worker's values are stored under, one bounded fetch of a step's cold parts, the slots of
parts that could not be served (reported to vLLM as load errors, so the engine recomputes
them), the write-through of committed fills in the background, and the counters that travel
to the scheduler and into every report. CPU attention path only: on the GPU layouts
(``paged_kv``) cold parts are load errors (logged once) and fills are not written through.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from .item_cold import ColdTier
from .item_cold_clients import LazyStore, store_address, store_from_config
from .item_pool_store import Entry

logger = logging.getLogger("recache_shim.item_cold")


def entry_layout(heads: int, dim: int, dtype, tp: tuple[int, int] = (0, 1)) -> str:
    """Names what an entry's bytes are: token-major ``[n, heads, dim]`` rows per layer, K as
    rotated at position 0, the dtype, and the tensor-parallel shard (each rank holds its own
    heads, so ranks must not read each other's entries)."""
    return (f"rows[n,{heads},{dim}];k-rope-at-0;{str(dtype).removeprefix('torch.')};"
            f"tp{tp[0]}/{tp[1]}")


def _tp_shard() -> tuple[int, int]:
    try:
        from vllm.distributed import (get_tensor_model_parallel_rank,
                                      get_tensor_model_parallel_world_size)

        return get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size()
    except Exception:  # no distributed state (tests, a single process): one shard
        return 0, 1


def is_cold(part) -> bool:
    """A load part ``(key, offset, count, pos, tokens)``; a local one has no ``tokens``."""
    return len(part) > 4


def blocks_of(slots, block_size: int) -> set[int]:
    return {int(s) // block_size for s in slots}


def split_parts(op):
    """Each part of a load with the slots it covers (a load's slots list its parts in order)."""
    run = 0
    for part in op.parts:
        n = int(part[2])
        yield part, op.slots[run:run + n]
        run += n


class ColdLoads:
    """The connector's worker-side use of the cold tier (inert without a ``store`` config).
    ``configure`` names the cache's entry layout (and starts the client's set-up);
    ``fetch`` reads a step's cold parts in one bounded call; ``write_through`` puts a
    committed fill in the background; ``take_counts`` gives the counts since its last call."""

    MAX_PENDING_PUTS = 32  # a store slower than the fills: later ones are dropped, counted

    def __init__(self, config, model: str, make_store=None):
        cfg = config if isinstance(config, dict) else {}
        self.enabled = bool(store_address(cfg))
        self.model = model
        try:
            # A step waits this long at most; computing a 100-item prompt takes seconds on
            # the testbed, a fetch of its items a few ms once connected (docs/store.md).
            self.timeout_s = max(0.001, float(cfg.get("timeout_ms", 250)) / 1000.0)
        except (TypeError, ValueError):
            logger.warning("recache item pool: store timeout_ms %r is not a number; 250 ms",
                           cfg.get("timeout_ms"))
            self.timeout_s = 0.25
        try:
            self.put_timeout_s = max(0.001, float(cfg.get("put_timeout_ms", 2000)) / 1000.0)
        except (TypeError, ValueError):
            self.put_timeout_s = 2.0
        self.make_store = make_store or (lambda: store_from_config(cfg))
        # The master's address, followed so a restarted store is reached again (not with a
        # store made by the caller: tests).
        self.watch_addr = store_address(cfg) if self.enabled and make_store is None else ""

        self.layout: str | None = None
        self.shape: tuple[int, int] | None = None
        self.tier: ColdTier | None = None
        self.puts: ThreadPoolExecutor | None = None
        self.pending = 0
        self.lock = threading.Lock()
        self.shipped: dict = {}
        self.warned: set[str] = set()
        self.store: LazyStore | None = None

    def start(self) -> None:
        """Worker side: starts setting the client up now, in the background, so that it is
        ready before the first cold request (a set-up takes about a second; inside a fetch's
        bound it would fail the first requests). The scheduler side never calls it: each
        client lends the store memory."""
        if not self.enabled or self.store is not None:
            return
        # Late-bound: the store's maker may be swapped until the first set-up (tests do).
        self.store = LazyStore(lambda: self.make_store())
        if self.watch_addr:
            target, args = self.store.watch, (self.watch_addr,)
        else:  # a store without an address to watch (tests): set up once
            target, args = self._connect, (self.store,)
        threading.Thread(target=target, args=args, daemon=True, name="recache-cold").start()

    def warn_once(self, what: str, msg: str, *args) -> None:
        if what not in self.warned:
            self.warned.add(what)
            logger.warning(msg, *args)

    def configure(self, heads: int, dim: int, dtype) -> None:
        """The layout of this worker's entries; the first call also starts connecting."""
        if not self.enabled or self.tier is not None:
            return
        self.shape = (heads, dim)
        self.layout = entry_layout(heads, dim, dtype, _tp_shard())
        self.start()  # a no-op when the worker started it at construction
        self.tier = ColdTier(self.store, self.model, self.layout, self.timeout_s,
                             self.put_timeout_s)

    @staticmethod
    def _connect(store: LazyStore) -> None:
        try:
            store.connect()
        except Exception:  # logged by LazyStore; fetches count it as errors
            pass

    def fetch(self, loads, layers) -> dict[tuple[str, tuple], Entry]:
        """The cold parts' entries of ``loads`` that the store served whole (every layer in
        ``layers``, the cache's heads and dim), keyed ``(key, tokens)``."""
        wants = list(dict.fromkeys((p[0], tuple(p[4])) for op in loads for p in op.parts
                                   if is_cold(p)))
        return self.fetch_wants(wants, layers)

    def fetch_wants(self, wants, layers) -> dict[tuple[str, tuple], Entry]:
        """The entries of ``wants`` ([(key, tokens)]) the store served whole, in one bounded
        call (SGLang's linker asks in ``lookup``, before it claims anything)."""
        if not wants or self.tier is None:
            return {}
        got = self.tier.get_many(wants)
        return {w: e for w, e in zip(wants, got) if e is not None and self._fits(w[0], e, layers)}

    def resolve(self, loads, layers, local, can_shift: bool):
        """What the worker writes for ``loads``: per load (slots tensor, [(entry, offset,
        count, pos)]), local parts from ``local(key)`` (the host pool), cold ones fetched now
        in one bounded call; and the slots of the parts neither serves (a miss, a local entry
        that is gone, ``pos`` without the model's RoPE), which the engine must recompute."""
        fetched = self.fetch(loads, layers)
        writes, failed = [], []
        for op in loads:
            parts, slots = [], []
            for part, mine in split_parts(op):
                key, off, n, pos = part[:4]
                e = fetched.get((key, tuple(part[4]))) if is_cold(part) else local(key)
                if e is not None and pos and not can_shift:
                    self.warn_once("rope", "recache item pool: re-rotation needs the model's "
                                   "RoPE; such parts are computed")
                    e = None
                if e is None:
                    failed.extend(mine)
                    continue
                parts.append((e, off, n, pos))
                slots.extend(mine)
            if parts:
                writes.append((torch.tensor(slots, dtype=torch.long), parts))
        return writes, failed

    def _fits(self, key: str, e: Entry, layers) -> bool:
        rows = len(e.tokens)
        want = (rows, *self.shape)
        ok = all(n in e.k and n in e.v and tuple(e.k[n].shape) == want
                 and tuple(e.v[n].shape) == want for n in layers)
        if not ok:  # same layout name, other layers or shapes: not servable here
            with self.tier.lock:
                self.tier.counts["hits"] -= 1
                self.tier.counts["mismatches"] += 1
            self.warn_once("fit", "recache item pool: store entry %s does not fit this "
                           "engine's layers; computed instead", key)
        return ok

    def write_through(self, key: str, entry: Entry) -> None:
        """Puts a committed fill to the store once, on a background thread (never blocks)."""
        if self.tier is None or not entry.tokens:
            return
        with self.lock:
            if self.pending >= self.MAX_PENDING_PUTS:
                self.tier.count("put_failures")
                self.warn_once("puts", "recache item pool: store puts fall behind; fills not "
                               "written through are counted as put failures")
                return
            self.pending += 1
        if self.puts is None:
            self.puts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recache-put")
        self.puts.submit(self._put, key, entry)

    def _put(self, key: str, entry: Entry) -> None:
        try:
            self.tier.put(key, entry)
        except Exception:  # packing failed (a tensor that cannot be viewed as bytes)
            self.tier.count("put_failures")
        finally:
            with self.lock:
                self.pending -= 1

    def take_counts(self) -> dict:
        """Increments since the previous call (non-zero ones): the tier's counts,
        ``fetch_s``, ``bytes`` and ``tokens``."""
        if self.store is None:
            return {}
        # Set-ups count from the start (before the first load names the layout: `tier`).
        now = {**(self.tier.snapshot() if self.tier else {}), "connects": self.store.connects,
               "losses": self.store.losses}
        inc = {k: v - self.shipped.get(k, 0) for k, v in now.items()}
        self.shipped = now
        return {k: v for k, v in inc.items() if v}

    def local_only(self, loads, resident):
        """The paged path's loads without cold parts or parts whose key is not ``resident``;
        (loads, slots of the parts left out). No cold tier there yet: said once."""
        out, failed = [], []
        for op in loads:
            parts, slots = [], []
            for part, mine in split_parts(op):
                if is_cold(part) or not resident(part[0]):
                    failed.extend(mine)
                    if is_cold(part):
                        self.warn_once("paged", "recache item pool: the cold tier is CPU-path "
                                       "only; cold items are computed on this engine")
                else:
                    parts.append(part)
                    slots.extend(mine)
            if parts:
                out.append(dataclasses.replace(op, parts=parts, slots=slots))
        return (out, failed) if failed else (list(loads), [])

    def close(self) -> None:
        """Ends the background puts (one in flight finishes within the bound), then the
        client (Mooncake unmounts this engine's segment)."""
        if self.puts is not None:
            self.puts.shutdown(wait=True, cancel_futures=True)
        if self.tier is not None:
            self.tier.close()
            try:
                self.tier.store.close()
            except Exception as e:  # shutting down: say it, do not raise
                logger.warning("recache item pool: closing the store client: %s", e)


# The scheduler's report fields: worker count -> stat (``store_misses`` sums every kind of miss).
STATS = {"hits": "store_hits", "mismatches": "store_mismatches", "timeouts": "store_timeouts",
         "errors": "store_errors", "puts": "store_puts", "put_failures": "store_put_failures",
         "fetch_s": "total_store_fetch_s", "bytes": "store_bytes_read",
         "tokens": "store_tokens_read", "bytes_written": "store_bytes_written",
         "connects": "store_connects", "losses": "store_losses"}
MISS_KINDS = ("misses", "mismatches", "timeouts", "errors")


def cold_stats() -> dict:
    """The cold tier's report fields, zero (``store_loaded_tokens``: the scheduler's count)."""
    out = {"store_hits": 0, "store_misses": 0, **{v: 0 for v in STATS.values()}}
    return {**out, "total_store_fetch_s": 0.0, "store_loaded_tokens": 0}


def add_cold_stats(stats: dict, inc: dict) -> None:
    """Adds a worker metadata's increments (:meth:`ColdLoads.take_counts`) to ``stats``."""
    for kind, name in STATS.items():
        stats[name] += inc.get(kind, 0)
    stats["store_misses"] += sum(inc.get(k, 0) for k in MISS_KINDS)


def merge_counts(a: dict, b: dict) -> dict:
    """Two workers' increments of one step: counts add up, seconds are the slower one's
    (workers fetch at the same time)."""
    out = dict(a or {})
    for k, v in (b or {}).items():
        out[k] = max(out.get(k, 0.0), v) if k == "fetch_s" else out.get(k, 0) + v
    return out


def served_name(vllm_config) -> str:
    """The model name entries are stored under: the served name, else the model."""
    mc = getattr(vllm_config, "model_config", None)
    name = getattr(mc, "served_model_name", None) or getattr(mc, "model", None) or ""
    if isinstance(name, (list, tuple)):
        name = name[0] if name else ""
    return str(name)
