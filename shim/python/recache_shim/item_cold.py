"""The item pool's cold tier: pool entries in a distributed KV store (issue 46, first piece).

Owns: how a pool entry (an item's token ids and per-layer K/V) is written to a store and read
back, and the client's bounded wait. Not wired into the connector yet: ``item_pool.py`` still
serves only what its own host filled (docs/store.md says what is built).

- One value per item, model and layout, under a key hashed from all of them
  (:func:`cold_key`). The value carries a header with the same fields, the tensors' dtypes and
  shapes; :func:`unpack` checks every one, so a stale or foreign value (another model, other
  tokens, another layout, a truncated write) is never served: it is counted as a mismatch and
  read as a miss.
- :class:`ColdTier` waits at most ``timeout_s`` for the store; a store that is down, slow or
  failing reads as a miss (counted by kind), never as an error or a wrong entry, so the item is
  computed as it is without a store.
- The store is anything with ``get(key) -> bytes | None`` and ``put(key, bytes)``;
  :class:`MooncakeStore` adapts Mooncake Store (chosen in docs/store.md).
"""

from __future__ import annotations

import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

import torch

from .item_pool_store import Entry

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

    def __init__(self, store, model: str, layout: str, timeout_s: float = 0.05):
        self.store, self.model, self.layout, self.timeout_s = store, model, layout, timeout_s
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="recache-cold")
        self.counts = dict.fromkeys(self.KINDS, 0)
        self.fetch_s = 0.0
        self.bytes_read = 0

    def _call(self, fn, *args):
        """``fn(*args)`` within the bound; (ok, result or the failure's kind)."""
        fut = self.pool.submit(fn, *args)
        try:
            return True, fut.result(timeout=self.timeout_s)
        except FutureTimeout:
            fut.cancel()
            return False, "timeouts"
        except Exception:  # a store client may raise anything; the request must not see it
            return False, "errors"

    def get(self, item: str, tokens) -> Entry | None:
        t0 = time.perf_counter()
        ok, blob = self._call(self.store.get, cold_key(self.model, item, tokens, self.layout))
        self.fetch_s += time.perf_counter() - t0
        if not ok:
            self.counts[blob] += 1
            return None
        if not blob:
            self.counts["misses"] += 1
            return None
        try:
            e = unpack(blob, self.model, item, tokens, self.layout)
        except Mismatch:
            self.counts["mismatches"] += 1
            return None
        self.counts["hits"] += 1
        self.bytes_read += len(blob)
        return e

    def put(self, item: str, entry: Entry) -> bool:
        blob = pack(entry, self.model, item, self.layout)
        key = cold_key(self.model, item, entry.tokens, self.layout)
        ok, _ = self._call(self.store.put, key, blob)
        self.counts["puts" if ok else "put_failures"] += 1
        return ok

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class MooncakeStore:
    """Mooncake Store's client (``mooncake-transfer-engine-non-cuda``; examples/store/install)."""

    def __init__(self, local: str, metadata: str, master: str, segment_bytes: int = 16 << 20,
                 buffer_bytes: int = 16 << 20, protocol: str = "tcp"):
        from mooncake.store import MooncakeDistributedStore

        self.client = MooncakeDistributedStore()
        rc = self.client.setup(local, metadata, segment_bytes, buffer_bytes, protocol, "", master)
        if rc != 0:
            raise ConnectionError(f"Mooncake Store setup failed ({rc}) at master {master}")

    def get(self, key: str) -> bytes | None:
        return self.client.get(key) or None

    def put(self, key: str, value: bytes) -> None:
        rc = self.client.put(key, value)
        if rc != 0:
            raise IOError(f"Mooncake put {key}: {rc}")

    def close(self) -> None:
        """Unmounts this client's segment (before its master goes, or the master logs it)."""
        self.client.close()
