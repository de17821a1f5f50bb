"""The item pool connector's cold tier without an engine (``item_pool.py`` + ``item_cold.py``):
the scheduler claims a segment as cold only with a store configured and only when recache
listed its key in ``cold`` (a locally resident entry still wins); the worker writes a store
entry into the request's slots bit-exact (read back through vLLM's CPU cache op), re-rotated
like a pooled one; a miss, a stale value (other tokens), a store that hangs or cannot be set
up, and a local entry that is gone leave their slots unwritten and report exactly their blocks
as load errors, within the bound; a committed fill is written through to the store once; the
counts reach every report. The stores here are in-memory fakes; the last test runs the same
fill and load through a real Mooncake Store when ``mooncake.store`` imports (in the vLLM venv,
after ``up --pool-store``, or from the store venv of examples/store/install), else it says
SKIPPED. Run with the testbed venv's Python:

    ~/.cache/recache-testbed/venv-vllm/bin/python shim/python/tests/test_item_pool_cold.py
"""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace as NS

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# The store's start-up helpers (free port, wait for it to listen) are measure.py's.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "store"))

from recache_shim.item_cold import cold_key, pack, unpack  # noqa: E402
from recache_shim.item_cold_loads import ColdLoads, entry_layout  # noqa: E402
from recache_shim.item_pool import (  # noqa: E402
    LoadOp, PoolWorkerMeta, RecacheItemPoolConnector, SchedulerState, slots_of)
from recache_shim.item_pool_store import Entry, split_kv  # noqa: E402
from recache_shim.paged_kv import rope_shift  # noqa: E402
from test_item_pool import BS, DIM, HEADS, LAYERS, _finish, _isa, _req, _step  # noqa: E402
from testkit import wait_for  # noqa: E402

MODEL = "tiny-qwen2"
LAYOUT = entry_layout(HEADS, DIM, torch.bfloat16)
STORE = {"master": "127.0.0.1:1", "metadata": "http://127.0.0.1:1/metadata", "timeout_ms": 50}


class FakeStore:
    """An in-memory store with the interface ColdTier uses; counts calls."""

    def __init__(self):
        self.d, self.gets, self.puts = {}, 0, 0
        self.put_done = threading.Event()

    def get(self, key):
        self.gets += 1
        return self.d.get(key)

    def get_many(self, keys):
        self.gets += len(keys)
        return [self.d.get(k) for k in keys]

    def put(self, key, value):
        self.d[key] = bytes(value)
        self.puts += 1
        self.put_done.set()

    def plant(self, item, e: Entry, tokens=None):
        """``e`` under the key of ``tokens`` (default its own: a good entry)."""
        self.d[cold_key(MODEL, item, tokens or e.tokens, LAYOUT)] = pack(e, MODEL, item, LAYOUT)


class HungStore(FakeStore):
    """Answers nothing until the test releases it."""

    def __init__(self):
        super().__init__()
        self.released = threading.Event()

    def get_many(self, keys):
        self.released.wait(timeout=10)
        return super().get_many(keys)


def entry(tokens, seed) -> Entry:
    g = torch.Generator().manual_seed(seed)
    e = Entry(tokens=tuple(tokens))
    for n in LAYERS:
        e.k[n] = torch.randn(len(tokens), HEADS, DIM, generator=g).to(torch.bfloat16)
        e.v[n] = torch.randn(len(tokens), HEADS, DIM, generator=g).to(torch.bfloat16)
    return e


def item(label, n=BS):
    """An item segment: label + tokens, ``n`` in all (BS: exactly one block)."""
    return [label] + list(range(label % 97 + 40, label % 97 + 39 + n))


def connector(store=None, fake=None, rope=False):
    mc = NS(served_model_name=MODEL, model="/models/x")
    if rope:
        mc.hf_config, mc.get_head_size = NS(rope_theta=1e6), (lambda: DIM)
    extra = {"pool_bytes": 1 << 30, **({"store": store} if store else {})}
    cfg = NS(cache_config=NS(block_size=BS), model_config=mc,
             kv_transfer_config=NS(kv_connector_extra_config=extra, is_kv_producer=True))
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    conn = RecacheItemPoolConnector(cfg, KVConnectorRole.WORKER, None)
    if fake is not None:
        conn.cold.make_store = lambda: fake
    return conn


class Engine:
    """A forward context of CPU attention layers (8 blocks), installed as vLLM's current one."""

    def __init__(self):
        import vllm.forward_context as vfc

        self.isa, self.io = _isa()
        self.layers = {n: NS(isa=self.isa, kv_cache=torch.zeros(8, HEADS, BS, 2 * DIM,
                                                                dtype=torch.bfloat16))
                       for n in LAYERS}
        self.fc = NS(no_compile_layers=self.layers)
        self.vfc, self.saved = vfc, vfc.get_forward_context
        vfc.get_forward_context = lambda: self.fc

    def close(self):
        self.vfc.get_forward_context = self.saved

    def read(self, name, blocks, start, end):
        kc, vc = split_kv(self.layers[name].kv_cache)
        return self.io.read(kc, vc, torch.tensor(slots_of(blocks, BS, start, end)))

    def write(self, e: Entry, blocks):
        for n in LAYERS:
            kc, vc = split_kv(self.layers[n].kv_cache)
            self.io.write(kc, vc, torch.tensor(slots_of(blocks, BS, 0, len(e.tokens))),
                          e.k[n], e.v[n])

    def zero(self):
        for layer in self.layers.values():
            layer.kv_cache.zero_()

    def holds(self, e: Entry, blocks, start=0) -> bool:
        return all(torch.equal(got, want) for n in LAYERS
                   for got, want in zip(self.read(n, blocks, start, start + len(e.tokens)),
                                        (e.k[n], e.v[n])))

    def blank(self, blocks) -> bool:
        return all(self.layers[n].kv_cache[b].abs().sum() == 0 for n in LAYERS for b in blocks)

    def fill(self, conn, key, e: Entry, block):
        """A fill request whose forward wrote ``e`` into ``block``; committed."""
        self.write(e, [block])
        _step(conn, self.fc, [(_req("f-" + key, list(e.tokens), {"fill": key}), block, 0)])


def test_scheduler_claims_cold_only_when_listed():
    st = SchedulerState(budget_bytes=1000)
    prompt = [10, 11, 12, 20, 21, 30, 31, 32, 99]
    segs = [["a", 0, 3], ["b", 3, 2], ["c", 5, 3]]
    st.committed("a", (10, 11, 12), 100)
    st.committed("c", (30, 31, 32), 100)
    assert st.match(prompt, segs) == (3, [("a", 0, 3, 0)])  # no cold list: as before
    end, run = st.match(prompt, segs, cold={"b"})
    assert end == 8 and run == [("a", 0, 3, 0), ("b", 3, 2, 0, (20, 21)), ("c", 5, 3, 0)], run
    # Resident with the same tokens: the local entry wins even when listed cold.
    assert st.match(prompt, segs, cold={"a", "b", "c"})[1][0] == ("a", 0, 3, 0)
    # Resident with other tokens (another label) and listed: a cold part with the prompt's.
    st.committed("b", (20, 22), 100)
    assert st.match(prompt, segs, cold={"b"})[1][1] == ("b", 3, 2, 0, (20, 21))
    assert st.match(prompt, segs)[0] == 3
    # Cold parts still tile from token 0, and a segment past the prompt's end stops the run.
    assert st.match(prompt, [["b", 3, 2]], cold={"b"}) == (0, [])
    assert st.match(prompt, [["a", 0, 3], ["b", 3, 9]], cold={"b"})[0] == 3
    # pos travels with a cold part like with a local one.
    assert st.match(prompt, [["b", 0, 2, 40]], cold={"b"})[1] == [("b", 0, 2, 40, (10, 11))]


def test_connector_claims_cold_only_with_a_store():
    prompt = item(1001) + [7, 8]
    p = {"segments": [["m/x", 0, BS]], "cold": ["m/x"]}
    assert connector().get_num_new_matched_tokens(_req("r", prompt, p), 0) == (0, False)
    assert connector(STORE).get_num_new_matched_tokens(_req("r", prompt, p), 0) == (BS, False)
    odd = dict(p, cold="m/x")  # not a list: ignored
    assert connector(STORE).get_num_new_matched_tokens(_req("r", prompt, odd), 0) == (0, False)
    bad = {"segments": [["m/x", "zero", BS]], "cold": ["m/x"]}  # malformed: nothing claimed
    assert connector(STORE).get_num_new_matched_tokens(_req("r", prompt, bad), 0) == (0, False)


def test_store_entry_written_bit_exact_next_to_a_local_one():
    eng = Engine()
    try:
        fake = FakeStore()
        conn = connector(STORE, fake, rope=True)
        a, c = entry(item(1001), 1), entry(item(1002), 2)
        eng.fill(conn, "m/a", a, 1)  # local; its K/V also written through
        assert conn.cold.layout == LAYOUT
        wait_for(lambda: conn.cold.tier.snapshot()["puts"] == 1, "the fill's write-through")
        fake.plant("m/c", c)
        gets = fake.gets
        # Ranking: a (local) + c (cold) + user tokens, in blocks 4, 5, 6.
        prompt = list(a.tokens) + list(c.tokens) + [7, 8, 9]
        segs = [["m/a", 0, BS], ["m/c", BS, BS]]
        rank = _req("r2", prompt, {"segments": segs, "cold": ["m/a", "m/c"]})
        eng.zero()
        meta, wm = _step(conn, eng.fc, [(rank, [4, 5, 6], 2 * BS)])
        parts = meta.loads[0].parts
        assert parts[0] == ("m/a", 0, BS, 0) and parts[1][:4] == ("m/c", 0, BS, 0), parts
        assert conn.get_block_ids_with_load_errors() == set()
        assert eng.holds(a, [4]) and eng.holds(c, [4, 5], start=BS)
        assert fake.gets == gets + 1, "the local entry was fetched from the store"
        assert conn.store.get("m/c") is None  # fetched entries are not kept
        assert wm.cold["hits"] == 1 and wm.cold["bytes"] > 0 and wm.cold["fetch_s"] > 0
        assert wm.cold["tokens"] == BS, "the tokens the hit delivered"
        r = _finish(conn, rank)
        assert r["loaded_tokens"] == 2 * BS and r["store_loaded_tokens"] == BS, r
        assert r["store_hits"] == 1 and r["store_misses"] == 0 and r["store_puts"] == 1, r
        assert r["store_bytes_read"] == len(fake.d[cold_key(MODEL, "m/c", c.tokens, LAYOUT)])
        assert r["store_bytes_written"] == sum(len(v) for v in fake.d.values()) - len(
            fake.d[cold_key(MODEL, "m/c", c.tokens, LAYOUT)]), "the one fill written through"
        assert r["present"] == ["m/a"] and r["total_store_fetch_s"] > 0
        # The store's rate as recache reads it: tokens delivered over seconds fetching.
        assert r["store_tokens_read"] == BS, r
        # A cold item after a user prefix: K re-rotated by pos, exactly like a pooled one.
        user = [5, 6, 7, 8]
        rank = _req("r3", list(c.tokens) + user, {"segments": [["m/c", 0, BS, 40]],
                                                   "cold": ["m/c"]})
        _step(conn, eng.fc, [(rank, [2, 3], BS)])
        assert conn.get_block_ids_with_load_errors() == set()
        for n in LAYERS:
            k, v = eng.read(n, [2], 0, BS)
            assert torch.equal(k, rope_shift(c.k[n], 40, conn.rope)) and torch.equal(v, c.v[n])
        conn.shutdown()
    finally:
        eng.close()


def _failing_step(eng, conn, fake):
    """A ranking of local a (block 4), one cold item (block 5), user tokens (block 6): the
    step's load errors and the seconds start_load_kv took."""
    a, x = entry(item(1001), 1), entry(item(1005), 5)
    if conn.store.get("m/a") is None:
        eng.fill(conn, "m/a", a, 1)
    eng.zero()
    took = []
    load = conn.start_load_kv

    def timed(fc, **kw):
        t0 = time.perf_counter()
        load(fc, **kw)
        took.append(time.perf_counter() - t0)

    conn.start_load_kv = timed
    rank = _req("r", list(a.tokens) + list(x.tokens) + [7, 8],
                {"segments": [["m/a", 0, BS], ["m/x", BS, BS]], "cold": ["m/x"]})
    _step(conn, eng.fc, [(rank, [4, 5, 6], 2 * BS)])
    conn.start_load_kv = load
    errors = conn.get_block_ids_with_load_errors()
    assert conn.get_block_ids_with_load_errors() == set(), "load errors are handed out once"
    assert eng.holds(a, [4]), "the local part was not written"
    assert eng.blank([5, 6]), "a failed part's slots were written"
    return errors, took[0], _finish(conn, rank), x


def test_miss_stale_value_and_hung_store_fail_only_their_blocks():
    eng = Engine()
    try:
        fake = FakeStore()
        conn = connector(STORE, fake)
        errors, took, r, x = _failing_step(eng, conn, fake)  # empty store: a miss
        assert errors == {5} and r["store_misses"] == 1 and r["store_hits"] == 0, (errors, r)
        # A value written for other tokens planted under x's key (a stale write): not served.
        fake.plant("m/x", entry(item(1006), 6), tokens=x.tokens)
        errors, took, r, _ = _failing_step(eng, conn, fake)
        assert errors == {5} and r["store_mismatches"] == 1 and r["store_misses"] == 2, r

        conn.shutdown()
        hung = HungStore()
        conn = connector(STORE, hung)
        try:
            errors, took, r, _ = _failing_step(eng, conn, hung)
            assert took < 1.0, f"start_load_kv waited {took:.2f} s for a hung store (bound 50 ms)"
            assert errors == {5} and r["store_timeouts"] == 1 and r["store_misses"] == 1, r
        finally:
            hung.released.set()
            conn.shutdown()
    finally:
        eng.close()


def test_client_that_cannot_set_up_and_gone_local_entry_are_load_errors():
    eng = Engine()
    try:
        def broken():
            raise ConnectionError("master down")

        conn = connector(STORE)
        conn.cold.make_store = broken
        errors, _, r, _ = _failing_step(eng, conn, None)
        assert errors == {5} and r["store_errors"] == 1 and r["store_misses"] == 1, r
        wait_for(lambda: conn.cold.tier.snapshot()["put_failures"] == 1,
                 "the fill's write-through to fail")
        # The scheduler still lists m/a, the worker lost it: no crash, its block recomputed.
        conn.store.drop("m/a")
        a = entry(item(1001), 1)
        rank = _req("r", list(a.tokens) + [7], {"segments": [["m/a", 0, BS]]})
        _step(conn, eng.fc, [(rank, [3, 4], BS)])
        assert conn.get_block_ids_with_load_errors() == {3}
        conn.shutdown()
    finally:
        eng.close()


def test_fill_is_written_through_once_and_decodes():
    eng = Engine()
    try:
        fake = FakeStore()
        conn = connector(STORE, fake)
        a = entry(item(1001), 1)
        eng.fill(conn, "m/a", a, 1)
        assert fake.put_done.wait(timeout=5), "the fill was not written through"
        wait_for(lambda: conn.cold.tier.snapshot()["puts"] == 1, "the put's count")
        blob = fake.d[cold_key(MODEL, "m/a", a.tokens, LAYOUT)]
        got = unpack(blob, MODEL, "m/a", a.tokens, LAYOUT)
        assert all(torch.equal(got.k[n], a.k[n]) and torch.equal(got.v[n], a.v[n])
                   for n in LAYERS)
        _step(conn, eng.fc, [])  # a step's metadata carries the count (this one's at latest)
        r = _finish(conn, _req("l", [0], {"list": True}))
        assert r["store_puts"] == 1 and r["store_put_failures"] == 0 and r["stores"] == 1, r
        assert _step(conn, eng.fc, [])[1] is None and fake.puts == 1  # once, nothing pending
        conn.shutdown()
    finally:
        eng.close()


def test_counts_aggregate_and_zero_without_a_store():
    a = PoolWorkerMeta(cold={"hits": 2, "fetch_s": 0.25, "bytes": 10})
    b = PoolWorkerMeta(cold={"hits": 1, "timeouts": 1, "fetch_s": 0.5})
    assert a.aggregate(b).cold == {"hits": 3, "timeouts": 1, "fetch_s": 0.5, "bytes": 10}
    assert PoolWorkerMeta().aggregate(PoolWorkerMeta()).cold == {}
    r = SchedulerState(1000).report([], 0)
    for k in ("store_hits", "store_misses", "store_mismatches", "store_timeouts",
              "store_errors", "store_puts", "store_put_failures", "total_store_fetch_s",
              "store_bytes_read", "store_tokens_read", "store_bytes_written",
              "store_loaded_tokens"):
        assert r[k] == 0, k


def test_paged_path_reports_cold_and_missing_parts():
    cold = ColdLoads(STORE, MODEL)
    op = LoadOp("r", [("m/a", 0, 3, 0), ("m/b", 0, 2, 0, (5, 6)), ("m/gone", 0, 2, 0)],
                [10, 11, 12, 13, 14, 15, 16])
    loads, failed = cold.local_only([op], {"m/a"}.__contains__)
    assert failed == [13, 14, 15, 16] and len(loads) == 1
    assert loads[0].parts == [("m/a", 0, 3, 0)] and loads[0].slots == [10, 11, 12]
    assert cold.local_only([LoadOp("r", [("m/b", 0, 1, 0, (5,))], [3])], bool) == ([], [3])


def _mooncake():
    """(mooncake_master path, None) or (None, why not)."""
    try:
        import mooncake.store  # noqa: F401
        bins = [Path(sys.executable).parent]
    except ImportError as e:
        home = os.environ.get("RECACHE_TESTBED_HOME", Path.home() / ".cache/recache-testbed")
        venv = Path(os.environ.get("RECACHE_STORE_VENV", Path(home) / "venv-store"))
        site = next(iter(sorted(venv.glob("lib/python3*/site-packages"))), None)
        if site is None:
            return None, (f"mooncake.store does not import in this venv ({e}; up --pool-store "
                          f"installs it) and there is no store venv at {venv}")
        sys.path.append(str(site))
        try:
            import mooncake.store  # noqa: F401
        except ImportError as e2:
            return None, f"mooncake.store imports neither here nor from {site}: {e2}"
        bins = [venv / "bin"]
    master = next((b / "mooncake_master" for b in bins if (b / "mooncake_master").exists()), None)
    return (master, None) if master else (None, f"no mooncake_master in {bins[0]}")


def test_fill_and_cold_load_through_a_real_mooncake_store():
    master, why = _mooncake()
    if master is None:
        return f"SKIPPED: {why}"
    from measure import free_port, wait_port

    rpc, meta = free_port(), free_port()
    proc = subprocess.Popen(
        [str(master), f"--rpc_port={rpc}", "--enable_http_metadata_server=true",
         f"--http_metadata_server_port={meta}", "--http_metadata_server_host=127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    eng = Engine()
    conns = []
    try:
        wait_port(rpc, "mooncake_master", proc)
        wait_port(meta, "mooncake_master's metadata server", proc)
        store = {"master": f"127.0.0.1:{rpc}", "metadata": f"http://127.0.0.1:{meta}/metadata",
                 "local": "127.0.0.1", "timeout_ms": 5000, "segment_bytes": 16 << 20,
                 "buffer_bytes": 16 << 20}
        filler, reader = connector(store), connector(store)  # two replicas, one store
        conns += [filler, reader]
        a = entry(item(1001), 1)
        eng.fill(filler, "m/a", a, 1)
        wait_for(lambda: filler.cold.tier.snapshot()["puts"] == 1, "the write-through put",
                 timeout=20)
        eng.zero()
        rank = _req("r", list(a.tokens) + [7, 8], {"segments": [["m/a", 0, BS]],
                                                    "cold": ["m/a"]})
        _step(reader, eng.fc, [(rank, [4, 5], BS)])
        assert reader.get_block_ids_with_load_errors() == set()
        assert eng.holds(a, [4]), "the store's entry was not written bit-exact"
        r = _finish(reader, rank)
        assert r["store_hits"] == 1 and r["store_loaded_tokens"] == BS, r
        # Another label: other tokens, so another key; a miss, its block recomputed.
        b = list(a.tokens)
        b[0] = 1009
        rank = _req("r2", b + [7], {"segments": [["m/a", 0, BS]], "cold": ["m/a"]})
        _step(reader, eng.fc, [(rank, [6, 7], BS)])
        assert reader.get_block_ids_with_load_errors() == {6}
        assert _finish(reader, rank)["store_misses"] == 1
    finally:
        for c in conns:
            c.shutdown()
        eng.close()
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            said = fn()
            print(f"{name}: {said or 'ok'}")
