"""The item pool's cold tier: pool entries in a distributed KV store (issue 46).

Owns: how a pool entry (an item's token ids and per-layer K/V) is written to a store and read
back, the client's bounded wait, and the connector's worker-side use of the tier
(:class:`ColdLoads`): one bounded fetch of a step's cold parts, the slots of parts that could
not be served (reported to vLLM as load errors, so the engine recomputes them), and the
write-through of committed fills in the background. ``item_pool.py`` decides what is cold
(scheduler side) and writes what this module fetched.

- One value per item, model and layout, under a key hashed from all of them
  (:func:`cold_key`). The value carries a header with the same fields, the tensors' dtypes and
  shapes; :func:`unpack` checks every one, so a stale or foreign value (another model, other
  tokens, another layout, a truncated write) is never served: it is counted as a mismatch and
  read as a miss.
- :class:`ColdTier` waits at most ``timeout_s`` for the store (``get_many``: one deadline for
  the whole batch); a store that is down, slow or failing reads as a miss (counted by kind),
  never as an error or a wrong entry, so the item is computed as it is without a store.
- The store is anything with ``get(key) -> bytes | None`` and ``put(key, bytes)``, optionally
  ``get_many(keys) -> [bytes | None]`` (one round trip); :class:`MooncakeStore` adapts
  Mooncake Store, :class:`RedisStore` Redis/Valkey (docs/store.md compares them). :class:`LazyStore` sets the client up on its first
  call, inside the tier's bounded wait, so a master that is down or slow never holds up an
  engine step (a failed set-up is logged once and retried after ``retry_s``).
- Fetched entries are served to the request that asked and not kept: cold items are read per
  request (BAT §5.2); the host pool keeps only what this engine filled.
- CPU attention path only: on the GPU layouts (``paged_kv``) cold parts are reported as load
  errors (logged once) and the fill write-through is off.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import socket
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
        self.bytes_written = 0  # the store's memory this client filled (values it took)

    def count(self, kind: str, n: int = 1) -> None:
        with self.lock:
            self.counts[kind] += n

    def snapshot(self) -> dict:
        """Every count and ``fetch_s``, ``bytes`` so far (cumulative)."""
        with self.lock:
            return {**self.counts, "fetch_s": self.fetch_s, "bytes": self.bytes_read,
                    "bytes_written": self.bytes_written}

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

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        """One batched round trip (``get_batch``); a missing key reads as empty bytes."""
        return [b or None for b in self.client.get_batch(list(keys))]

    def put(self, key: str, value: bytes) -> None:
        rc = self.client.put(key, value)
        if rc != 0:
            raise IOError(f"Mooncake put {key}: {rc}")

    def close(self) -> None:
        """Unmounts this client's segment (before its master goes, or the master logs it)."""
        self.client.close()


class RedisStore:
    """Redis (or Valkey) as the store (``redis==8.1.0``, examples/store/install): one server
    holds every value, so a read is one round trip to it, with no transfer between the
    engines (docs/store.md says when to prefer it to Mooncake)."""

    def __init__(self, url: str):
        import redis

        self.client = redis.Redis.from_url(url, socket_connect_timeout=2.0, socket_timeout=5.0)
        self.client.ping()  # fails here, inside the set-up, when nothing answers

    def get(self, key: str) -> bytes | None:
        return self.client.get(key) or None

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        return [b or None for b in self.client.mget(list(keys))]

    def put(self, key: str, value: bytes) -> None:
        self.client.set(key, value)

    def close(self) -> None:
        self.client.close()


def store_address(cfg: dict) -> str:
    """The store's ``host:port`` (Mooncake's master, or the Redis server of ``url``)."""
    url = str(cfg.get("url") or "")
    if url:
        return url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    return str(cfg.get("master") or "")


def store_from_config(cfg: dict):
    """The client the connector's ``store`` config names: ``url`` (redis://host:port) for
    Redis, else ``master`` (and ``metadata``) for Mooncake Store."""
    if cfg.get("url"):
        return RedisStore(str(cfg["url"]))
    return mooncake_from_config(cfg)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def mooncake_from_config(cfg: dict) -> MooncakeStore:
    """The client the connector's ``store`` config names (``local`` without a port: a free
    one; ``segment_bytes``: memory this engine lends the store; ``buffer_bytes``: the client's
    transfer buffer, which a step's batch of cold values must fit)."""
    local = str(cfg.get("local") or "127.0.0.1")
    if ":" not in local:
        local = f"{local}:{free_port(local)}"
    return MooncakeStore(local, str(cfg.get("metadata", "")), str(cfg["master"]),
                         segment_bytes=int(cfg.get("segment_bytes", 64 << 20)),
                         buffer_bytes=int(cfg.get("buffer_bytes", 64 << 20)))


class LazyStore:
    """A store whose client ``make()`` builds on the first call that needs it. Calls run on
    :class:`ColdTier`'s threads, so a set-up that hangs or fails costs a request no more than
    the tier's bound; a failure is logged once and tried again after ``retry_s``."""

    # Calls failing in a row before the client is dropped and set up again: a store that
    # restarted (empty, perhaps elsewhere) is not reached through the old client's state.
    RESET_AFTER = 8
    # A call running this long has hung (a fetch is bounded far below it; a put at 2 s).
    HANG_S = 5.0

    def __init__(self, make, retry_s: float = 30.0):
        self.make, self.retry_s = make, retry_s
        self.client = None
        self.failed_at: float | None = None
        self.warned = False
        self.lock = threading.Lock()
        self.connects = 0  # successful set-ups so far
        self.failing = 0  # calls failed in a row on the current client
        self.inflight: dict = {}  # call -> (client, started): what `hung` looks at

    def connect(self):
        with self.lock:
            if self.client is not None:
                return self.client
            if self.failed_at is not None and time.monotonic() - self.failed_at < self.retry_s:
                raise ConnectionError("the store's client is not set up (retried later)")
            try:
                self.client = self.make()
            except Exception as e:
                self.failed_at = time.monotonic()
                if not self.warned:
                    self.warned = True
                    logger.warning("recache item pool: store client set-up failed (%s); cold "
                                   "items are computed until it works (retry every %.0f s)",
                                   e, self.retry_s)
                raise
            self.failed_at = None
            self.connects += 1
            self.failing = 0
            logger.info("recache item pool: store client set up")
            return self.client

    def _use(self, fn):
        c = self.connect()
        call = object()
        with self.lock:
            self.inflight[call] = (c, time.monotonic())
        try:
            out = fn(c)
        except Exception:
            self._failed(c)
            raise
        finally:
            with self.lock:
                self.inflight.pop(call, None)
        self.failing = 0
        return out

    def hung(self) -> bool:
        """Drops the client when one of its calls has run longer than ``HANG_S`` (seen here:
        a transfer from another client's segment that never completed, after which that
        client read nothing more); the call keeps its thread, the client is not closed (its
        close could hang too), and the next call sets up a new one. Whether it dropped one."""
        now = time.monotonic()
        with self.lock:
            stuck = [c for c, t0 in self.inflight.values()
                     if c is self.client and now - t0 > self.HANG_S]
            if not stuck:
                return False
            self.client, self.failing = None, 0
        logger.warning("recache item pool: a store call has hung for over %.0f s; setting "
                       "the client up again", self.HANG_S)
        return True

    def _failed(self, c) -> None:
        with self.lock:
            if self.client is not c:
                return
            self.failing += 1
            if self.failing < self.RESET_AFTER:
                return
            self.client, self.failing = None, 0
        logger.warning("recache item pool: %d store calls failed in a row; setting the client "
                       "up again", self.RESET_AFTER)
        try:
            c.close()
        except Exception:  # the old client's store is gone: nothing to unmount
            pass

    def reset(self) -> None:
        """Drops the client (the next call sets one up): its store went away."""
        with self.lock:
            c, self.client, self.failing, self.failed_at = self.client, None, 0, None
        if c is not None:
            try:
                c.close()
            except Exception:  # the old client's store is gone: nothing to unmount
                pass

    def watch(self, addr: str, every_s: float = 1.0) -> None:
        """Follows the store's address (a TCP connect every ``every_s``, on this thread,
        forever): when it stops answering the client is dropped, and when it answers again a
        new one is set up at once, so a restarted store (empty; it knows no client) is used
        again without waiting for calls to fail."""
        host, _, port = addr.rpartition(":")
        up = None
        while True:
            try:
                socket.create_connection((host or "127.0.0.1", int(port)), timeout=0.5).close()
                now = True
            except (OSError, ValueError):
                now = False
            if now != up:
                if up is not None:
                    logger.warning("recache item pool: store %s %s", addr,
                                   "is back; setting the client up" if now else
                                   "stopped answering; cold items are computed")
                if up is not None or not now:
                    self.reset()
                if now:
                    try:
                        self.connect()
                    except Exception:  # logged by connect; tried again by later calls
                        pass
                up = now
            if now and self.hung():
                try:
                    self.connect()
                except Exception:  # logged by connect; tried again by later calls
                    pass
            time.sleep(every_s)  # a poll interval, not a wait for an event we could get

    def get(self, key: str):
        return self._use(lambda c: c.get(key))

    def get_many(self, keys: list[str]):
        return self._use(lambda c: c.get_many(keys) if hasattr(c, "get_many")
                         else [c.get(k) for k in keys])

    def put(self, key: str, value: bytes):
        return self._use(lambda c: c.put(key, value))

    def close(self) -> None:
        if not self.lock.acquire(timeout=5.0):  # a set-up still hangs: leave it to the exit
            return
        try:
            client, self.client = self.client, None
        finally:
            self.lock.release()
        if client is not None and hasattr(client, "close"):
            client.close()


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
        ``fetch_s`` and ``bytes``."""
        if self.store is None:
            return {}
        # Set-ups count from the start (before the first load names the layout: `tier`).
        now = {**(self.tier.snapshot() if self.tier else {}), "connects": self.store.connects}
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
         "bytes_written": "store_bytes_written", "connects": "store_connects"}
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
