"""The item pool's cold tier: pool entries in a distributed KV store (issue 46).

Owns: how a pool entry (an item's token ids and per-layer K/V) is written to a store and read
back, and the bounded client every read and write goes through. The store clients are in
``item_cold_clients`` (Redis, Mooncake Store, and the set-up / watch around them), the
connector's worker-side use of the tier in ``item_cold_loads``; ``item_pool.py`` decides
what is cold (scheduler side) and writes what is fetched.

- One value per item, model and layout, under a key hashed from all of them
  (:func:`cold_key`). The value carries a header with the same fields, the tensors' dtypes and
  shapes; :func:`unpack` checks every one, so a stale or foreign value (another model, other
  tokens, another layout, a truncated write) is never served: it is counted as a mismatch and
  read as a miss.
- :class:`ColdTier` waits at most ``timeout_s`` for the store (``get_many``: one deadline for
  the whole batch; puts their own, looser bound); a store that is down, slow or failing reads
  as a miss (counted by kind), never as an error or a wrong entry, so the item is computed as
  it is without a store.
- The store is anything with ``get(key) -> bytes | None`` and ``put(key, bytes)``, optionally
  ``get_many(keys) -> [bytes | None]`` (one round trip).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from concurrent.futures import TimeoutError as FutureTimeout

import torch

from .item_pool_store import Entry

logger = logging.getLogger(__name__)
MAGIC = b"RCKV1\n"


class Mismatch(ValueError):
    """A stored value that is not the entry asked for."""


def cold_key(model: str, item: str, tokens, layout: str) -> str:
    """The store key of an item's entry: every field that makes its K/V what it is."""
    ident = json.dumps([model, item, [int(t) for t in tokens], layout]).encode()
    return "recache/" + hashlib.sha256(ident).hexdigest()[:40]


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise Mismatch(f"unknown dtype {name}")
    return dt


def pack(entry: Entry, model: str, item: str, layout: str) -> bytes:
    """Header (JSON) and the raw bytes of K then V of every layer, layers in name order."""
    layers = sorted(entry.k)
    tensors = [t for name in layers for t in (entry.k[name], entry.v[name])]
    head = json.dumps({
        "model": model, "item": item, "tokens": [int(t) for t in entry.tokens],
        "layout": layout, "layers": layers,
        "tensors": [[str(t.dtype), list(t.shape)] for t in tensors],
    }).encode()
    body = b"".join(t.contiguous().view(torch.uint8).numpy().tobytes() for t in tensors)
    return MAGIC + len(head).to_bytes(4, "little") + head + body


def unpack(blob: bytes, model: str, item: str, tokens, layout: str) -> Entry:
    """The entry in ``blob``; :class:`Mismatch` unless it is exactly the one asked for."""
    if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 4:
        raise Mismatch("not a recache pool entry")
    at = len(MAGIC) + 4
    n = int.from_bytes(blob[len(MAGIC):at], "little")
    try:
        head = json.loads(blob[at:at + n])
    except ValueError as e:
        raise Mismatch(f"unreadable header: {e}") from e
    want = {"model": model, "item": item, "tokens": [int(t) for t in tokens], "layout": layout}
    for field, value in want.items():
        if head.get(field) != value:
            raise Mismatch(f"{field} differs")
    specs = head.get("tensors", [])
    layers = head.get("layers", [])
    if len(specs) != 2 * len(layers):
        raise Mismatch("tensor count differs from layer count")
    sizes = []
    for dt, shape in specs:
        if not shape or shape[0] != len(want["tokens"]):
            raise Mismatch("a tensor's token rows differ from the entry's tokens")
        sizes.append(torch.Size(shape).numel() * _dtype(dt).itemsize)
    data = memoryview(blob)[at + n:]
    if len(data) != sum(sizes):
        raise Mismatch(f"body is {len(data)} bytes, the header says {sum(sizes)}")
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    out, off = [], 0
    for (dt, shape), size in zip(specs, sizes):
        try:
            out.append(raw[off:off + size].view(_dtype(dt)).reshape(shape))
        except RuntimeError as e:  # misaligned or impossible shapes: not ours
            raise Mismatch(f"tensor bytes do not fit {dt} {shape}: {e}") from e
        off += size
    e = Entry(tokens=tuple(want["tokens"]))
    for i, name in enumerate(layers):
        e.k[name], e.v[name] = out[2 * i], out[2 * i + 1]
    return e


class ColdTier:
    """Entries read from and written to ``store``, each call bounded by ``timeout_s``."""

    KINDS = ("hits", "misses", "mismatches", "timeouts", "errors", "puts", "put_failures")

    def __init__(self, store, model: str, layout: str, timeout_s: float = 0.05,
                 put_timeout_s: float = 2.0):
        self.store, self.model, self.layout, self.timeout_s = store, model, layout, timeout_s
        # Puts run in the background (no request waits on them): a looser bound, which only
        # keeps a hung store from holding the put thread for ever.
        self.put_timeout_s = put_timeout_s
        # Threads left waiting on a hung store stay busy; more than one keeps a put from
        # holding up the next get.
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recache-cold")
        self.lock = threading.Lock()  # counts: gets on the engine's thread, puts on another
        self.counts = dict.fromkeys(self.KINDS, 0)
        self.fetch_s = 0.0
        self.bytes_read = 0
        # Tokens the hits delivered: with fetch_s, the store's rate in tokens/s (Alg. 1's B).
        self.tokens_read = 0
        self.bytes_written = 0  # the store's memory this client filled (values it took)

    def count(self, kind: str, n: int = 1) -> None:
        with self.lock:
            self.counts[kind] += n

    def snapshot(self) -> dict:
        """Every count and ``fetch_s``, ``bytes``, ``tokens`` so far (cumulative)."""
        with self.lock:
            return {**self.counts, "fetch_s": self.fetch_s, "bytes": self.bytes_read,
                    "tokens": self.tokens_read, "bytes_written": self.bytes_written}

    def _call(self, fn, *args, timeout_s: float | None = None):
        """``fn(*args)`` within the bound; (ok, result or the failure's kind)."""
        fut = self.pool.submit(fn, *args)
        try:
            return True, fut.result(timeout=self.timeout_s if timeout_s is None else timeout_s)
        except FutureTimeout:
            fut.cancel()
            return False, "timeouts"
        except Exception:  # a store client may raise anything; the request must not see it
            return False, "errors"

    def _decode(self, item: str, tokens, ok: bool, blob) -> Entry | None:
        """The entry a store answer holds, counted by kind (None unless it is the one asked)."""
        if not ok:
            self.count(blob)
            return None
        if not blob:
            self.count("misses")
            return None
        try:
            e = unpack(blob, self.model, item, tokens, self.layout)
        except Mismatch:
            self.count("mismatches")
            return None
        with self.lock:
            self.counts["hits"] += 1
            self.bytes_read += len(blob)
            self.tokens_read += len(e.tokens)
        return e

    def _timed(self, t0: float) -> None:
        with self.lock:
            self.fetch_s += time.perf_counter() - t0

    def get(self, item: str, tokens) -> Entry | None:
        t0 = time.perf_counter()
        ok, blob = self._call(self.store.get, cold_key(self.model, item, tokens, self.layout))
        self._timed(t0)
        return self._decode(item, tokens, ok, blob)

    def get_many(self, wants) -> list[Entry | None]:
        """Entries of ``wants`` ([(item, tokens)]) with one deadline for all of them: the
        store's ``get_many`` (one round trip) when it has one, else its gets in parallel."""
        wants = list(wants)
        if not wants:
            return []
        t0 = time.perf_counter()
        keys = [cold_key(self.model, item, tokens, self.layout) for item, tokens in wants]
        if hasattr(self.store, "get_many"):
            ok, got = self._call(self.store.get_many, keys)
            if ok and not (isinstance(got, (list, tuple)) and len(got) == len(keys)):
                ok, got = False, "errors"  # an answer that does not line up serves nothing
            answers = [(True, b) for b in got] if ok else [(False, got)] * len(keys)
        else:
            futs = [self.pool.submit(self.store.get, k) for k in keys]
            done, _ = wait(futs, timeout=self.timeout_s)
            answers = [self._answer(f, f in done) for f in futs]
        self._timed(t0)
        return [self._decode(item, tokens, ok, blob)
                for (item, tokens), (ok, blob) in zip(wants, answers)]

    @staticmethod
    def _answer(fut, done: bool):
        if not done:
            fut.cancel()
            return False, "timeouts"
        if fut.exception() is not None:
            return False, "errors"
        return True, fut.result()

    def put(self, item: str, entry: Entry) -> bool:
        blob = pack(entry, self.model, item, self.layout)
        key = cold_key(self.model, item, entry.tokens, self.layout)
        ok, why = self._call(self.store.put, key, blob, timeout_s=self.put_timeout_s)
        if not ok:
            logger.debug("recache item pool: store put %s failed (%s)", item, why)
        with self.lock:
            self.counts["puts" if ok else "put_failures"] += 1
            self.bytes_written += len(blob) if ok else 0
        return ok

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
