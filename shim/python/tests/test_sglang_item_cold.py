"""The item pool's cold tier on SGLang (``sglang_item_pool`` + ``sglang_item_cold``) against
SGLang 0.5.23's real ``MHATokenToKVPool`` on CPU and an in-memory store, no server: a fill on
one linker is written through to the store; another linker, its pool empty, claims that item
only when recache lists it in ``cold``, reads it in ``lookup`` and writes the first linker's
rows bit-exact (re-rotated by ``pos`` like a pooled item); a miss, a stale value and a store
that hangs cut the claim before the item within the bound (SGLang computes it, nothing
aborts); a request that waits and is looked up again reads the store once; the counts reach
the report. The live engines' check is tests/tests/engine_sglang_item_pool.rs. Run with the
SGLang venv's Python:

    ~/.cache/recache-testbed/venv-sglang/bin/python shim/python/tests/test_sglang_item_cold.py
"""

import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace as NS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from recache_shim.item_cold import cold_key  # noqa: E402
from recache_shim.paged_kv import RopeSpec, rope_shift  # noqa: E402
from recache_shim.sglang_item_cold import SglangCold  # noqa: E402
from test_sglang_item_pool import A, B, D, L, claim, fill, load, make  # noqa: E402
from testkit import run_all, wait_for  # noqa: E402

MODEL = "tiny-qwen2"
STORE = {"url": "redis://127.0.0.1:1", "timeout_ms": 100}


class FakeStore:
    """An in-memory store with the interface the tier uses; counts calls."""

    def __init__(self):
        self.d, self.gets, self.hang = {}, 0, None

    def get_many(self, keys):
        self.gets += len(keys)
        if self.hang is not None:
            self.hang.wait(timeout=10)
        return [self.d.get(k) for k in keys]

    def get(self, key):
        return self.get_many([key])[0]

    def put(self, key, value):
        self.d[key] = bytes(value)

    def close(self):
        pass


def with_store(fake):
    """A linker whose cold tier uses ``fake``, connected."""
    linker, kv = make()
    linker.cold = SglangCold(STORE, MODEL, kv, make_store=lambda: fake)
    wait_for(lambda: linker.cold.loads.store.connects >= 1, "the store client's set-up")
    return linker, kv


def filled_through(fake, key, tokens):
    """Fills ``key`` on a first linker and waits for its write-through; its rows."""
    first, kv = with_store(fake)
    rows, _ = fill(first, kv, key, tokens, 0)
    wait_for(lambda: len(fake.d) == 1, "the fill's write-through")
    return rows


def test_a_fill_elsewhere_is_served_from_the_store_bit_exact():
    fake = FakeStore()
    rows_a = filled_through(fake, "m/a", A)
    linker, kv = with_store(fake)
    prompt = A + [900, 901]
    _, pages = claim(linker, "r0", prompt, {"segments": [["m/a", 0, len(A)]]})
    assert pages == [] and fake.gets == 0  # not listed cold: not asked for
    plan = {"segments": [["m/a", 0, len(A)]], "cold": ["m/a"]}
    r, pages = claim(linker, "r", prompt, plan)
    assert pages == [len(A)], pages
    assert load(linker, "r", 100, len(A))
    for layer in range(L):
        assert torch.equal(kv.k_buffer[layer][100:100 + len(A)], rows_a[layer][0])
        assert torch.equal(kv.v_buffer[layer][100:100 + len(A)], rows_a[layer][1])
    linker.on_release(r, NS())
    report = r.customized_info["recache_pool"][0]
    assert report["store_hits"] == 1 and report["store_loaded_tokens"] == len(A), report
    assert report["loaded_tokens"] == len(A) and report["present"] == []  # not adopted here


def test_cold_parts_continue_a_local_run_and_re_rotate():
    fake = FakeStore()
    rows_b = filled_through(fake, "m/b", B)
    linker, kv = with_store(fake)
    linker.rope = RopeSpec(D, 10000.0)
    rows_a, _ = fill(linker, kv, "m/a", A, 0)
    prompt = [7] * 8 + A + B + [1]
    plan = {"segments": [["m/a", 8, len(A), 8], ["m/b", 8 + len(A), len(B), 8]],
            "cold": ["m/b"]}
    _, pages = claim(linker, "r", prompt, plan, hit=8)
    assert pages == [len(A) + len(B)], pages
    assert load(linker, "r", 200, len(A) + len(B))
    for layer in range(L):
        want = torch.cat([rows_a[layer][0], rows_b[layer][0]])
        want = rope_shift(want, 8, linker.rope).to(torch.bfloat16)
        assert torch.equal(kv.k_buffer[layer][200:200 + len(A) + len(B)], want)
        assert torch.equal(kv.v_buffer[layer][200 + len(A):200 + len(A) + len(B)], rows_b[layer][1])


def test_a_miss_or_a_stale_value_cuts_the_claim_before_the_item():
    fake = FakeStore()
    linker, kv = with_store(fake)
    fill(linker, kv, "m/a", A, 0)
    wait_for(lambda: len(fake.d) == 1, "the fill's write-through")
    plan = {"segments": [["m/a", 0, len(A)], ["m/b", len(A), len(B)]], "cold": ["m/b"]}
    _, pages = claim(linker, "miss", A + B + [1], plan)
    assert pages == [len(A)], pages  # m/b is nowhere: computed
    # A value under m/b's key for these tokens that holds other tokens: a mismatch, computed.
    fake.d[cold_key(MODEL, "m/b", tuple(B), linker.cold.loads.layout)] = \
        next(iter(fake.d.values()))
    _, pages = claim(linker, "stale", A + B + [1], plan)
    assert pages == [len(A)], pages
    r = claim(linker, "rep", [5, 6], {"list": True})[0]
    linker.on_release(r, NS())
    report = r.customized_info["recache_pool"][0]
    assert report["store_misses"] >= 2 and report["store_mismatches"] >= 1, report


def test_a_hung_store_costs_one_bound_and_claims_nothing_cold():
    fake = FakeStore()
    linker, kv = with_store(fake)
    fake.hang = threading.Event()
    plan = {"segments": [["m/b", 0, len(B)]], "cold": ["m/b"]}
    t0 = time.perf_counter()
    _, pages = claim(linker, "r", B + [1], plan)
    took = time.perf_counter() - t0
    fake.hang.set()
    assert pages == [] and took < 1.0, (pages, took)  # the bound is 100 ms


def test_a_waiting_request_reads_the_store_once():
    fake = FakeStore()
    filled_through(fake, "m/a", A)
    linker, _ = with_store(fake)
    plan = {"segments": [["m/a", 0, len(A)]], "cold": ["m/a"]}
    for _ in range(3):  # SGLang looks a waiting request up again each step
        _, pages = claim(linker, "r", A + [1], plan)
        assert pages == [len(A)]
    assert fake.gets == 1, fake.gets
    linker.on_release(claim(linker, "r", A + [1], plan)[0], NS())
    assert "r" not in linker.cold.got  # released: its answers go


if __name__ == "__main__":
    run_all(globals())
