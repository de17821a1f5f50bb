"""recache's item KV pool connector without an engine: the CPU slot I/O (vLLM's real
`cpu_attn_reshape_and_cache` op, every x86 ISA it has), the pool store, and the scheduler
side's accounting (leading run of resident segments, token check, evictions, budget).
Run with the testbed venv's Python:

    ~/.cache/recache-testbed/venv-vllm/bin/python shim/python/tests/test_item_pool.py
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recache_shim.item_pool import SchedulerState, slots_of  # noqa: E402
from recache_shim.item_pool_store import Entry, PoolStore, SlotIO, split_kv  # noqa: E402


def test_slot_io_round_trip_for_each_isa():
    from vllm import _custom_ops as ops

    tested = []
    isas = ["vec", "vec16"] + (["amx"] if torch.cpu._is_amx_tile_supported() else [])
    for isa in isas:  # amx instructions on a CPU without AMX would kill the process
        try:
            io = SlotIO(ops.cpu_attn_reshape_and_cache, isa, 2, 32, 64, torch.bfloat16)
        except RuntimeError as e:  # the ISA is not built or not supported by this CPU
            print(f"  isa {isa}: skipped ({str(e)[:80]})")
            continue
        io.verify()
        # A layer cache in vLLM's shape: [blocks, heads, block, 2*D]; tokens land mid-block.
        layer = torch.zeros(4, 2, 32, 128, dtype=torch.bfloat16)
        kc, vc = split_kv(layer)
        k = torch.randn(45, 2, 64).to(torch.bfloat16)
        v = torch.randn(45, 2, 64).to(torch.bfloat16)
        slots = torch.tensor(slots_of([3, 1], 32, 10, 55))
        io.write(kc, vc, slots, k, v)
        rk, rv = io.read(kc, vc, slots)
        assert torch.equal(rk, k) and torch.equal(rv, v), isa
        tested.append(isa)
    assert tested, "no CPU attention ISA could be probed"
    print(f"  isas: {tested}")


def test_store_bytes():
    s = PoolStore()
    e = Entry((1, 2), {"l0": torch.zeros(2, 2, 4, dtype=torch.bfloat16)},
              {"l0": torch.zeros(2, 2, 4, dtype=torch.bfloat16)})
    s.put("m/a", e)
    assert s.nbytes == 2 * 16 * 2 and s.get("m/a") is e
    assert s.drop("m/a") and not s.drop("m/a")


def test_scheduler_claims_only_the_resident_leading_run():
    st = SchedulerState(budget_bytes=1000)
    prompt = [10, 11, 12, 20, 21, 30, 31, 32, 99, 98]
    segs = [["a", 0, 3], ["b", 3, 2], ["c", 5, 3]]
    assert st.match(prompt, segs) == (0, [])
    st.committed("a", (10, 11, 12), 100)
    st.committed("c", (30, 31, 32), 100)
    # b is missing: the run stops there even though c is resident.
    assert st.match(prompt, segs) == (3, [("a", 0, 3)])
    st.committed("b", (20, 21), 100)
    assert st.match(prompt, segs)[0] == 8
    # Same key, other tokens (e.g. another label): never claimed.
    other = [10, 11, 13] + prompt[3:]
    assert st.match(other, segs) == (0, [])
    # Segments must tile the prompt from token 0.
    assert st.match(prompt, [["b", 3, 2]]) == (0, [])
    st.evict(["b"])
    assert st.match(prompt, segs)[0] == 3 and st.to_evict == ["b"]
    assert st.bytes == 200


def test_budget_drops_least_recently_used_and_refill_cancels_eviction():
    st = SchedulerState(budget_bytes=250)
    st.committed("a", (1,), 100)
    st.committed("b", (2,), 100)
    st.touch(["a"])  # a used last: b is the oldest
    st.committed("c", (3,), 100)
    assert list(st.index) == ["a", "c"] and st.bytes == 200 and st.to_evict == ["b"]
    st.committed("b", (2,), 100)  # refilled before the worker heard of the eviction
    assert "b" not in st.to_evict and "b" in st.index


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
            print(f"ok {name}")
