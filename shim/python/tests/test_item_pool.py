"""recache's item KV pool connector without an engine: the CPU slot I/O (vLLM's real
`cpu_attn_reshape_and_cache` op, every x86 ISA it has), the pool store, and the scheduler
side's accounting (leading run of resident segments, token check, evictions, budget), and the
whole connector driven by hand through both halves (fill, list, load, list+evict, timings).
Run with the testbed venv's Python:

    ~/.cache/recache-testbed/venv-vllm/bin/python shim/python/tests/test_item_pool.py
"""

import sys
from pathlib import Path
from types import SimpleNamespace as NS

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recache_shim.item_pool import (  # noqa: E402
    PARAMS,
    PoolMeta,
    PoolWorkerMeta,
    RecacheItemPoolConnector,
    SchedulerState,
    slots_of,
)
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
    assert st.match(prompt, segs) == (3, [("a", 0, 3, 0)])
    # A segment's optional 4th field is the position its first token takes (default 0).
    assert st.match(prompt, [["a", 0, 3, 40]]) == (3, [("a", 0, 3, 40)])
    st.committed("b", (20, 21), 100)
    assert st.match(prompt, segs)[0] == 8
    # Same key, other tokens (e.g. another label): never claimed.
    other = [10, 11, 13] + prompt[3:]
    assert st.match(other, segs) == (0, [])
    # Segments must tile the prompt from token 0 ...
    assert st.match(prompt, [["b", 3, 2]]) == (0, [])
    # ... or from the end of what the engine's prefix cache holds (a cached user prefix).
    assert st.match(prompt, [["b", 3, 2]], cached=3) == (5, [("b", 3, 2, 0)])
    assert st.match(prompt, [["b", 3, 2], ["c", 5, 3, 3]], cached=4) == (
        8, [("b", 3, 2, 0), ("c", 5, 3, 3)])
    assert st.match(prompt, [["b", 3, 2]], cached=2) == (0, [])
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


def test_codecs_keep_rows_within_half_a_step_in_fewer_bytes():
    from recache_shim import item_codec

    torch.manual_seed(3)
    k = (torch.randn(19, 2, 128) * torch.linspace(0.1, 30, 128)).to(torch.bfloat16)
    k[4, 1] = 0  # a row of zeros decodes to zeros
    kept = item_codec.encode(k, "int8")
    back = item_codec.rows(kept, 0, 19)
    assert back.dtype == torch.bfloat16 and back.shape == k.shape
    step = k.float().abs().amax(-1, keepdim=True) / 127
    # Half an int8 step, plus the bf16 rounding of the decoded value.
    err = (back.float() - k.float()).abs()
    assert bool((err <= step / 2 + k.float().abs() / 128 + 1e-6).all()), err.max()
    assert bool((back[4, 1] == 0).all())
    assert torch.equal(item_codec.rows(kept, 5, 3), back[5:8])
    assert item_codec.nbytes(kept) == 19 * 2 * (128 + 2)  # bf16: 19 * 2 * 256
    assert item_codec.encode(k, "bf16") is k
    e = Entry(tokens=(1,) * 19, k={"l0": k}, v={"l0": k.clone()}).encoded("int8")
    assert e.nbytes == 2 * 19 * 2 * 130
    # One decode for many parts equals each part decoded alone, in order; bf16 parts too.
    parts = [(e.k["l0"], 2, 4), (e.k["l0"], 11, 3), (e.v["l0"], 0, 1)]
    assert torch.equal(item_codec.gather(parts), torch.cat([back[2:6], back[11:14], back[0:1]]))
    assert torch.equal(item_codec.gather([(k, 1, 2), (kept, 3, 1)]),
                       torch.cat([k[1:3], back[3:4]]))
    # int4: a step of the group's absolute maximum / 7, two values a byte, a scale per 32.
    kept4 = item_codec.encode(k, "int4")
    back4 = item_codec.rows(kept4, 0, 19)
    assert back4.shape == k.shape and torch.equal(item_codec.rows(kept4, 5, 3), back4[5:8])
    step4 = k.float().unflatten(-1, (4, 32)).abs().amax(-1, keepdim=True) / 7
    err4 = (back4.float() - k.float()).unflatten(-1, (4, 32)).abs()
    assert bool((err4 <= step4 / 2 + k.float().unflatten(-1, (4, 32)).abs() / 128 + 1e-6).all())
    assert bool((back4[4, 1] == 0).all())
    assert item_codec.nbytes(kept4) == 19 * 2 * (64 + 4 * 2)
    try:
        item_codec.encode(k, "fp4")
        raise AssertionError("an unknown codec must be refused")
    except ValueError as err:
        assert "fp4" in str(err)


def test_listing_has_committed_entries_only():
    st = SchedulerState(budget_bytes=1000)
    assert st.listing() == []
    st.committed("m/a", (1001, 5, 6), 100)
    st.committed("m/b", (1002, 7), 100)
    st.touch(["m/a"])  # least recently used first
    assert st.listing() == [["m/b", 1002, 2], ["m/a", 1001, 3]]
    r = st.report(["m/a", "m/x"], 0, listing=True)
    assert r["present"] == ["m/a"] and r["list"] == st.listing() and r["entries"] == 2
    assert "list" not in st.report([], 0)
    st.evict(["m/b"])
    assert st.report([], 0, listing=True)["list"] == [["m/a", 1001, 3]]


def test_worker_meta_aggregates_without_double_counting():
    a = PoolWorkerMeta([("r1", "m/a", 10)], load_s=0.5, fill_s=0.25)
    b = PoolWorkerMeta([("r1", "m/a", 10)], load_s=0.75, fill_s=0.125)
    c = a.aggregate(b)  # two workers in one step: they ran at the same time
    assert c.load_s == 0.75 and c.fill_s == 0.25 and len(c.stored) == 2
    st = SchedulerState(budget_bytes=1000)
    st.worker_times(c.load_s, c.fill_s)
    st.worker_times(0.25, 0.0)  # the next step's increments add up
    assert st.stats["total_load_s"] == 1.0 and st.stats["total_fill_s"] == 0.25


# ---- the whole connector, both halves, driven by hand (vLLM's real CPU cache write op) ----

BS, HEADS, DIM = 32, 2, 64
LAYERS = ("model.layers.0.attn", "model.layers.1.attn")


def _isa():
    from vllm import _custom_ops as ops

    for isa in ("vec", "vec16"):
        try:
            return isa, SlotIO(ops.cpu_attn_reshape_and_cache, isa, HEADS, BS, DIM, torch.bfloat16)
        except RuntimeError:
            continue
    raise RuntimeError("no CPU attention ISA could be probed")


def _connector():
    cfg = NS(cache_config=NS(block_size=BS),
             kv_transfer_config=NS(kv_connector_extra_config={"pool_bytes": 1 << 30},
                                   is_kv_producer=True))
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    return RecacheItemPoolConnector(cfg, KVConnectorRole.WORKER, None)


def _req(rid, prompt, params):
    return NS(request_id=rid, prompt_token_ids=prompt, kv_transfer_params={PARAMS: params})


def _step(conn, fc, new):
    """One engine step for new requests [(req, block id or [block ids], external tokens)]: the
    scheduler's matching and metadata, the worker's load / capture / commit, the output back."""
    for req, _, _ in new:
        conn.on_new_request(req)
        conn.get_num_new_matched_tokens(req, 0)
    for req, _, ext in new:
        conn.update_state_after_alloc(req, None, ext)
    so = NS(scheduled_new_reqs=[NS(req_id=r.request_id, block_ids=(list(b) if isinstance(b, list) else [b],),
                                   num_computed_tokens=e)
                                for r, b, e in new],
            scheduled_cached_reqs=NS(req_ids=[], new_block_ids=[], resumed_req_ids=set(),
                                     num_computed_tokens=[]),
            num_scheduled_tokens={r.request_id: len(r.prompt_token_ids) - e for r, _, e in new})
    meta = conn.build_connector_meta(so)
    assert isinstance(meta, PoolMeta)
    conn.bind_connector_metadata(meta)
    conn.start_load_kv(fc)
    for name, layer in fc.no_compile_layers.items():
        conn.wait_for_layer_load(name)
        conn.save_kv_layer(name, layer.kv_cache, None)
    conn.wait_for_save()
    conn.clear_connector_metadata()
    wm = conn.build_connector_worker_meta()
    conn.update_connector_output(NS(kv_connector_worker_meta=wm))
    return meta, wm


def _finish(conn, req):
    """The report (here asked after the step's output; vLLM asks just before it)."""
    return conn.request_finished(req, [])[1][PARAMS]


def test_connector_fill_list_load_evict_and_timings():
    import vllm.forward_context as vfc

    isa, io = _isa()
    layers = {n: NS(isa=isa, kv_cache=torch.zeros(4, HEADS, BS, 2 * DIM, dtype=torch.bfloat16))
              for n in LAYERS}
    fc = NS(no_compile_layers=layers)
    saved = vfc.get_forward_context
    vfc.get_forward_context = lambda: fc
    try:
        conn = _connector()
        before = _finish(conn, _req("l0", [0], {"list": True}))
        assert before["list"] == [] and before["total_load_s"] == 0.0
        assert before["total_fill_s"] == 0.0

        # The model's forward of fill r1 would write its K/V into block 1: do it by hand.
        item = [1001] + list(range(40, 58))  # label + 18 tokens
        ref = {}
        for n in LAYERS:
            k = torch.randn(len(item), HEADS, DIM).to(torch.bfloat16)
            v = torch.randn(len(item), HEADS, DIM).to(torch.bfloat16)
            kc, vc = split_kv(layers[n].kv_cache)
            io.write(kc, vc, torch.tensor(slots_of([1], BS, 0, len(item))), k, v)
            ref[n] = (k, v)
        fill = _req("r1", item, {"fill": "m/a"})
        pending = _req("r9", [1002, 1, 2], {"fill": "m/b"})  # scheduled, never computed
        conn.on_new_request(pending)
        conn.update_state_after_alloc(pending, None, 0)
        meta, wm = _step(conn, fc, [(fill, 1, 0)])
        assert [s.key for s in meta.stores] == ["m/a"] and wm.stored[0][1] == "m/a"
        assert wm.fill_s > 0 and wm.load_s == 0
        filled = _finish(conn, _req("l1", [0], {"list": True}))
        assert filled["list"] == [["m/a", 1001, len(item)]], filled["list"]
        assert filled["total_fill_s"] > 0 and filled["total_load_s"] == 0.0
        assert filled["stores"] == 1 and filled["present"] == [] and filled["loaded_tokens"] == 0

        # Ranking r2 = item + user tokens, in block 2: the pooled K/V is written into its slots.
        prompt = item + [7, 8, 9]
        rank = _req("r2", prompt, {"segments": [["m/a", 0, len(item)]]})
        assert conn.get_num_new_matched_tokens(rank, 0) == (len(item), False)
        meta, wm = _step(conn, fc, [(rank, 2, len(item))])
        assert len(meta.loads) == 1 and wm.load_s > 0 and not wm.stored
        for n in LAYERS:
            kc, vc = split_kv(layers[n].kv_cache)
            rk, rv = io.read(kc, vc, torch.tensor(slots_of([2], BS, 0, len(item))))
            assert torch.equal(rk, ref[n][0]) and torch.equal(rv, ref[n][1]), n
        loaded = _finish(conn, rank)
        assert loaded["loaded_tokens"] == len(item) and loaded["present"] == ["m/a"]
        assert loaded["total_load_s"] > filled["total_load_s"]
        assert loaded["total_fill_s"] == filled["total_fill_s"]
        assert "list" not in loaded

        # list + evict: the eviction is applied first, then listed; nothing is claimed.
        le = _req("l2", [0], {"list": True, "evict": ["m/a", "m/zz"]})
        conn.on_new_request(le)
        assert conn.get_num_new_matched_tokens(le, 0) == (0, False)
        after = _finish(conn, le)
        assert after["list"] == [] and after["entries"] == 0 and after["evictions"] == 1
        assert after["total_load_s"] == loaded["total_load_s"]
        meta, wm = _step(conn, fc, [])
        assert meta.evict == ["m/a", "m/zz"] and conn.store.get("m/a") is None
        assert wm is None  # nothing stored, no time spent: no metadata
    finally:
        vfc.get_forward_context = saved


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
            print(f"ok {name}")
