"""The item pool's cold tier (``recache_shim/item_cold.py``): an entry written to a store reads
back bit-exact; a value for another model, item, token list or layout, or a damaged one, is a
counted mismatch and a miss, never an entry; a store that is slow, failing or empty reads as a
miss within the bound, one bound for a whole batch (``get_many``); a client that cannot be set
up fails fast until its retry time. With the store venv (examples/store/install) on this machine, the same
round trip runs through a real Mooncake Store started here; without it that part is reported
SKIPPED. Run with the testbed venv's Python:

    ~/.cache/recache-testbed/venv-vllm/bin/python shim/python/tests/test_item_cold.py
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# The store's start-up helpers (free port, wait for it to listen) are measure.py's.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "store"))

from recache_shim.item_cold import (  # noqa: E402
    ColdTier, Mismatch, cold_key, pack, unpack)
from recache_shim.item_cold_clients import LazyStore  # noqa: E402
from recache_shim.item_pool_store import Entry  # noqa: E402
from measure import free_port, wait_port  # noqa: E402

LAYERS = ("model.layers.0.attn", "model.layers.1.attn")


def entry(tokens=(5, 6, 7), seed=0, dtype=torch.bfloat16) -> Entry:
    g = torch.Generator().manual_seed(seed)
    e = Entry(tokens=tuple(tokens))
    for name in LAYERS:
        e.k[name] = torch.randn(len(tokens), 2, 8, generator=g).to(dtype)
        e.v[name] = torch.randn(len(tokens), 2, 8, generator=g).to(dtype)
    return e


def same(a: Entry, b: Entry) -> bool:
    return a.tokens == b.tokens and all(
        torch.equal(a.k[n], b.k[n]) and torch.equal(a.v[n], b.v[n]) for n in LAYERS)


class DictStore:
    def __init__(self):
        self.d = {}

    def get(self, key):
        return self.d.get(key)

    def put(self, key, value):
        self.d[key] = value


class SlowStore(DictStore):
    """Answers nothing until the test releases it (a store that hangs)."""

    def __init__(self):
        super().__init__()
        self.released = threading.Event()

    def get(self, key):
        self.released.wait(timeout=10)
        return super().get(key)


class DeadStore:
    def get(self, key):
        raise ConnectionError("store down")

    def put(self, key, value):
        raise ConnectionError("store down")


def test_round_trip_and_every_mismatch():
    for dtype in (torch.bfloat16, torch.float32):
        e = entry(dtype=dtype)
        blob = pack(e, "m", "item-1", "paged")
        assert same(unpack(blob, "m", "item-1", e.tokens, "paged"), e), dtype
    blob = pack(entry(), "m", "item-1", "paged")
    for args in (("other", "item-1", (5, 6, 7), "paged"), ("m", "item-2", (5, 6, 7), "paged"),
                 ("m", "item-1", (5, 6, 8), "paged"), ("m", "item-1", (5, 6, 7), "other")):
        try:
            unpack(blob, *args)
        except Mismatch:
            continue
        raise AssertionError(f"served for {args}")
    for bad in (blob[:-1], b"junk", blob[:10]):
        try:
            unpack(bad, "m", "item-1", (5, 6, 7), "paged")
        except Mismatch:
            continue
        raise AssertionError("a damaged value was served")
    assert cold_key("m", "i", (1, 2), "a") != cold_key("m", "i", (1, 3), "a")


def test_tier_counts_hits_misses_and_mismatches():
    store = DictStore()
    tier = ColdTier(store, "m", "paged", timeout_s=0.5)
    e = entry()
    assert tier.get("item-1", e.tokens) is None
    assert tier.put("item-1", e)
    assert same(tier.get("item-1", e.tokens), e)
    # A value planted under the key of other tokens (a stale write) is not served.
    store.put(cold_key("m", "item-1", (5, 6, 9), "paged"), pack(e, "m", "item-1", "paged"))
    assert tier.get("item-1", (5, 6, 9)) is None
    c = tier.counts
    assert (c["hits"], c["misses"], c["mismatches"], c["puts"]) == (1, 1, 1, 1), c
    tier.close()


def test_slow_or_dead_store_reads_as_a_miss_within_the_bound():
    hung = SlowStore()
    slow = ColdTier(hung, "m", "paged", timeout_s=0.05)
    t0 = time.perf_counter()
    assert slow.get("item-1", (5, 6, 7)) is None
    took = time.perf_counter() - t0
    assert took < 0.5, f"waited {took:.2f} s for a slow store"
    assert slow.counts["timeouts"] == 1
    hung.released.set()
    slow.close()
    dead = ColdTier(DeadStore(), "m", "paged", timeout_s=0.5)
    assert dead.get("item-1", (5, 6, 7)) is None
    assert not dead.put("item-1", entry())
    assert (dead.counts["errors"], dead.counts["put_failures"]) == (1, 1)
    dead.close()


class BatchStore(DictStore):
    """A store with one round trip for many keys (as Mooncake's ``get_batch``)."""

    def __init__(self):
        super().__init__()
        self.batches = 0

    def get_many(self, keys):
        self.batches += 1
        return [self.d.get(k) for k in keys]


def test_get_many_serves_each_and_counts_by_kind():
    for store in (DictStore(), BatchStore()):  # parallel gets, then one batched call
        tier = ColdTier(store, "m", "paged", timeout_s=0.5)
        a, b = entry(seed=1), entry(tokens=(8, 9), seed=2)
        assert tier.put("item-a", a) and tier.put("item-b", b)
        store.put(cold_key("m", "item-c", (1, 2), "paged"), pack(b, "m", "item-b", "paged"))
        got = tier.get_many([("item-a", a.tokens), ("item-b", (8, 10)), ("item-c", (1, 2)),
                             ("item-b", b.tokens)])
        assert same(got[0], a) and got[1] is None and got[2] is None and same(got[3], b)
        c = tier.counts
        assert (c["hits"], c["misses"], c["mismatches"]) == (2, 1, 1), c
        assert tier.get_many([]) == []
        assert getattr(store, "batches", 1) == 1
        tier.close()


def test_get_many_has_one_deadline_for_the_batch():
    hung = SlowStore()
    tier = ColdTier(hung, "m", "paged", timeout_s=0.05)
    t0 = time.perf_counter()
    assert tier.get_many([(f"item-{i}", (i,)) for i in range(6)]) == [None] * 6
    took = time.perf_counter() - t0
    assert took < 0.5, f"waited {took:.2f} s for 6 gets from a slow store (bound 0.05 s)"
    assert tier.counts["timeouts"] == 6, tier.counts
    hung.released.set()
    tier.close()


def failing_maker(fail_at: int, why: str):
    """A store maker whose `fail_at`-th call fails (ConnectionError `why`); the list it
    returns counts the calls."""
    made = []

    def make():
        made.append(1)
        if len(made) == fail_at:
            raise ConnectionError(why)
        return DictStore()

    return make, made


def test_lazy_store_sets_up_once_and_retries_after_a_failure():
    make, made = failing_maker(1, "master down")
    lazy = LazyStore(make, retry_s=60.0)
    for _ in range(2):  # the second call does not try again before retry_s
        try:
            lazy.get("k")
        except ConnectionError:
            continue
        raise AssertionError("a store that failed to set up answered")
    assert len(made) == 1
    lazy.retry_s = 0.0
    lazy.put("k", b"v")
    assert lazy.get_many(["k", "x"]) == [b"v", None] and len(made) == 2
    lazy.close()


def poll(lazy, cond, what, limit_s=10.0):
    """Waits for ``cond()`` (the watch thread's doing), woken by each change of ``lazy``'s
    client; fails with ``what`` after ``limit_s``."""
    if not lazy.wait_until(cond, limit_s):
        raise AssertionError(f"{what} never happened within {limit_s} s")


def test_watch_drops_the_client_when_the_store_goes_and_sets_up_anew_when_back():
    import socket

    def listen(port=0):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
        return s

    made = []
    lazy = LazyStore(lambda: made.append(1) or DictStore())
    srv = listen()
    port = srv.getsockname()[1]
    threading.Thread(target=lazy.watch, args=(f"127.0.0.1:{port}", 0.02), daemon=True).start()
    poll(lazy, lambda: lazy.connects == 1, "the first set-up")
    lazy.put("k", b"v")
    srv.close()  # the store goes away: the client with it
    poll(lazy, lambda: lazy.client is None, "the client dropped")
    assert lazy.losses == 1, "the loss is counted (item_cold_check.py waits on it)"
    srv = listen(port)  # back (a new, empty store): a new client at once, no call needed
    poll(lazy, lambda: lazy.connects == 2 and lazy.client is not None, "a second set-up")
    assert lazy.get("k") is None and len(made) == 2, "the new store does not have the old value"
    srv.close()


def test_watch_sets_a_client_up_when_calls_dropped_it_while_the_store_answers():
    # Calls failed while the store was away for a moment the watch did not see (it waited
    # on the lock behind their set-up): no client, a failed set-up, retry_s far off.
    import socket

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    make, made = failing_maker(2, "store away for a moment")
    lazy = LazyStore(make, retry_s=600.0)
    lazy.WATCH_RETRY_S = 0.05
    addr = f"127.0.0.1:{srv.getsockname()[1]}"
    threading.Thread(target=lazy.watch, args=(addr, 0.02), daemon=True).start()
    poll(lazy, lambda: lazy.connects == 1, "the first set-up")
    with lazy.lock:
        lazy.client = None  # what RESET_AFTER failed calls do
    try:
        lazy.get("k")  # a set-up fails (here or on the watch): retry_s would wait 600 s
    except ConnectionError:
        pass
    poll(lazy, lambda: lazy.connects == 2 and lazy.client is not None,
         "a set-up by the watch while the store answers")
    assert lazy.get("k") is None and len(made) == 3
    srv.close()


def test_a_hung_call_gets_the_client_set_up_again():
    release = threading.Event()

    class Hangs(DictStore):
        def get(self, key):
            release.wait()
            return None

    made = []
    lazy = LazyStore(lambda: made.append(1) or (Hangs() if len(made) == 1 else DictStore()))
    lazy.HANG_S = 0.0  # any call in flight counts as hung: no waiting for time to pass
    t = threading.Thread(target=lazy.get, args=("k",), daemon=True)
    t.start()
    poll(lazy, lambda: bool(lazy.inflight), "the call in flight")
    assert lazy.hung(), "the hung call seen"
    lazy.put("k", b"v")
    assert lazy.get("k") == b"v" and len(made) == 2, "a new client serves"
    release.set()
    t.join(timeout=5)
    assert not lazy.inflight


def store_venv():
    """The store venv examples/store/install makes (redis-py, Mooncake's client), its
    site-packages put on the path: the tests run on the engine venv's Python."""
    home = os.environ.get("RECACHE_TESTBED_HOME", Path.home() / ".cache/recache-testbed")
    venv = Path(os.environ.get("RECACHE_STORE_VENV", Path(home) / "venv-store"))
    site = next(iter(sorted(venv.glob("lib/python3*/site-packages"))), None)
    if site is not None and str(site) not in sys.path:
        sys.path.append(str(site))
    return venv, site


def test_round_trip_through_a_real_redis():
    import shutil

    store_venv()  # redis-py lives there, not in the engine venv
    server = shutil.which("redis-server")
    try:
        import redis  # noqa: F401
    except ImportError:
        server = None
    if server is None:
        return "SKIPPED: no redis-server or redis-py (examples/store/install installs both)"
    from recache_shim.item_cold_clients import RedisStore, store_address, store_from_config

    port = free_port()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_port(port, "redis-server", proc)
        cfg = {"url": f"redis://127.0.0.1:{port}"}
        assert store_address(cfg) == f"127.0.0.1:{port}"
        store = store_from_config(cfg)
        assert isinstance(store, RedisStore)
        tier = ColdTier(store, "m", "rows", timeout_s=2.0)
        e = entry(tokens=tuple(range(19)))
        assert tier.get("item-1", e.tokens) is None
        assert tier.put("item-1", e), tier.counts
        got = tier.get_many([("item-1", e.tokens), ("item-2", e.tokens)])
        assert same(got[0], e) and got[1] is None
        assert (tier.counts["hits"], tier.counts["misses"]) == (1, 2), tier.counts
        store.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_round_trip_through_a_real_mooncake_store():
    venv, site = store_venv()
    master = venv / "bin/mooncake_master"
    if not master.exists() or site is None:
        return "SKIPPED: no store venv (examples/store/install makes it)"
    from recache_shim.item_cold_clients import MooncakeStore

    rpc, meta = free_port(), free_port()
    proc = subprocess.Popen(
        [str(master), f"--rpc_port={rpc}", "--enable_http_metadata_server=true",
         f"--http_metadata_server_port={meta}", "--http_metadata_server_host=127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(rpc, "mooncake_master", proc)
        wait_port(meta, "mooncake_master's metadata server", proc)
        store = MooncakeStore(f"127.0.0.1:{free_port()}", f"http://127.0.0.1:{meta}/metadata",
                              f"127.0.0.1:{rpc}", segment_bytes=64 << 20)
        tier = ColdTier(store, "m", "paged", timeout_s=2.0)
        e = entry(tokens=tuple(range(19)))
        assert tier.get("item-1", e.tokens) is None
        assert tier.put("item-1", e), tier.counts
        assert same(tier.get("item-1", e.tokens), e)
        assert tier.get("item-1", tuple(range(1, 20))) is None
        assert (tier.counts["hits"], tier.counts["misses"]) == (1, 2), tier.counts
        got = tier.get_many([("item-1", e.tokens), ("item-2", e.tokens)])  # Mooncake get_batch
        assert same(got[0], e) and got[1] is None
        assert (tier.counts["hits"], tier.counts["misses"]) == (2, 3), tier.counts
        tier.close()
        store.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            said = fn()
            print(f"{name}: {said or 'ok'}")
