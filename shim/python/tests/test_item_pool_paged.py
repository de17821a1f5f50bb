"""The item pool connector on vLLM 0.32's GPU cache layouts, on CPU tensors (no GPU, no
server). For every ``KVCacheLayout`` the per-layer caches are built by vLLM's own
``create_kv_cache_views`` (exactly what a GPU worker gets), the connector is driven through a
fill and two loads, and what it wrote is read back the way FlashAttention reads it
(``kv.transpose(1, 2).split(D, -1)``). The connector's pointer, stride, slot and segment
arithmetic runs unchanged through the scatter kernel's CPU reference
(``recache_item_kv_scatter_host`` in the shim library), so the layout mapping and the RoPE
re-rotation are checked against an independent torch rotation. Run with the testbed venv's
Python and the release shim library:

    RECACHE_SHIM_LIB=target/release/librecache_shim.so \\
      ~/.cache/recache-testbed/venv-vllm/bin/python shim/python/tests/test_item_pool_paged.py
"""

import sys
from pathlib import Path
from types import SimpleNamespace as NS

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from recache_shim.item_pool import RecacheItemPoolConnector, slots_of  # noqa: E402
from recache_shim.paged_kv import ItemArena, LayoutError, RopeSpec, kv_views, rope_shift  # noqa: E402
from test_item_pool import _finish, _req, _step  # noqa: E402

BS, HEADS, DIM, BLOCKS, THETA = 16, 2, 64, 8, 1e6
LAYERS = ("model.layers.0.attn", "model.layers.1.attn", "model.layers.2.attn")


def _views(layout):
    """One [B, H, N, 2*D] bf16 view per layer, as vLLM 0.32 lays them out for ``layout``."""
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec, KVCacheTensor, compute_layout_strides, create_kv_cache_views)

    spec = FullAttentionSpec(block_size=BS, num_kv_heads=HEADS, head_size=DIM,
                             dtype=torch.bfloat16)
    st = compute_layout_strides(spec, BLOCKS, len(LAYERS), layout)
    raw = torch.zeros(BLOCKS * len(LAYERS) * spec.page_size_bytes, dtype=torch.int8)
    t = KVCacheTensor(size=raw.numel(), layers=list(LAYERS), layer_stride=st[0],
                      block_stride=st[1])
    return dict(zip(LAYERS, create_kv_cache_views(raw, spec, BLOCKS, layout, t)))


def _connector():
    hf = NS(rope_theta=THETA)
    cfg = NS(cache_config=NS(block_size=BS),
             model_config=NS(hf_config=hf, get_head_size=lambda: DIM),
             kv_transfer_config=NS(kv_connector_extra_config={"pool_bytes": 1 << 22},
                                   is_kv_producer=True))
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole

    return RecacheItemPoolConnector(cfg, KVConnectorRole.WORKER, None)


def _fa(kv):
    """K and V [blocks, tokens, heads, D] as vLLM's FlashAttention takes them."""
    return kv.transpose(1, 2).split(DIM, dim=-1)


def _rows(kv, block, n):
    k, v = _fa(kv)
    return k[block, :n].clone(), v[block, :n].clone()


def test_every_vllm_layout_fill_load_and_rerotation():
    import vllm.forward_context as vfc
    from vllm.v1.kv_cache_layout import KVCacheLayout

    saved = vfc.get_forward_context
    try:
        for layout in KVCacheLayout:
            caches = _views(layout)
            fc = NS(no_compile_layers={n: NS(kv_cache=kv) for n, kv in caches.items()})
            vfc.get_forward_context = lambda: fc
            conn = _connector()
            item = [1001] + list(range(40, 58))  # label + 18 tokens: spans two blocks of 16
            n = len(item)
            ref = {}
            g = torch.Generator().manual_seed(1)
            for name, kv in caches.items():
                k, v = _fa(kv)
                rk = torch.randn(n, HEADS, DIM, generator=g).to(torch.bfloat16)
                rv = torch.randn(n, HEADS, DIM, generator=g).to(torch.bfloat16)
                sl = torch.tensor(slots_of([1, 4], BS, 0, n))
                k[sl // BS, sl % BS] = rk  # the model's forward of the fill, by hand
                v[sl // BS, sl % BS] = rv
                ref[name] = (rk, rv)
            fill = _req("f", item, {"fill": "m/a"})
            meta, wm = _step(conn, fc, [(fill, [1, 4], 0)])
            assert wm.stored and wm.stored[0][1] == "m/a", (layout, wm)
            assert conn.paged is not None, conn.disabled
            assert _finish(conn, _req("l", [0], {"list": True}))["list"] == [["m/a", 1001, n]]

            # Load at the shared start (pos 0): rows copied exactly, into blocks 2 and 5.
            rank = _req("r", item + [7, 8], {"segments": [["m/a", 0, n]]})
            assert conn.get_num_new_matched_tokens(rank, 0) == (n, False)
            meta, wm = _step(conn, fc, [(rank, [2, 5], n)])
            for name, kv in caches.items():
                k, v = _fa(kv)
                sl = torch.tensor(slots_of([2, 5], BS, 0, n))
                assert torch.equal(k[sl // BS, sl % BS], ref[name][0]), (layout, name)
                assert torch.equal(v[sl // BS, sl % BS], ref[name][1]), (layout, name)

            # The same entry after a 37-token prefix (pos 37): K re-rotated by 37, V exact.
            rot = _req("p", item + [9], {"segments": [["m/a", 0, n, 37]]})
            assert conn.get_num_new_matched_tokens(rot, 0) == (n, False)
            _step(conn, fc, [(rot, [3, 6], n)])
            rope = RopeSpec(DIM, THETA)
            for name, kv in caches.items():
                k, v = _fa(kv)
                sl = torch.tensor(slots_of([3, 6], BS, 0, n))
                got, want = k[sl // BS, sl % BS].float(), rope_shift(ref[name][0], 37, rope).float()
                err = (got - want).abs().max().item()
                assert err <= 0.02 * want.abs().max().item(), (layout, name, err)
                assert not torch.equal(k[sl // BS, sl % BS], ref[name][0])
                assert torch.equal(v[sl // BS, sl % BS], ref[name][1]), (layout, name)
            # Nothing outside the requests' slots was written (blocks 0 and 7 stay zero).
            for kv in caches.values():
                assert not kv[0].any() and not kv[7].any(), layout
        print(f"ok {len(list(KVCacheLayout))} layouts")
    finally:
        vfc.get_forward_context = saved


def test_layout_errors_name_the_reason():
    kv = torch.zeros(4, HEADS, BS, 2 * DIM, dtype=torch.float32)
    try:
        kv_views(kv, DIM)
        raise AssertionError("fp32 accepted")
    except LayoutError as e:
        assert "fp16/bf16" in str(e)
    try:
        kv_views(torch.zeros(4, HEADS, BS, DIM, dtype=torch.bfloat16), DIM)
        raise AssertionError("K-only content accepted")
    except LayoutError as e:
        assert "K+V" in str(e)


def test_arena_first_fit_and_merge():
    a = ItemArena(["l0"], 1, 8, torch.bfloat16, 10, pin=False)
    s1, s2, s3 = a.alloc(4), a.alloc(3), a.alloc(3)
    assert (s1, s2, s3) == (0, 4, 7) and a.alloc(1) is None
    a.entries.update({"x": (0, 4), "y": (4, 3)})
    assert a.drop("x") and a.drop("y") and a.free == [(0, 7)]
    assert a.alloc(6) == 0 and a.entry_bytes(2) == 2 * 2 * 8 * 2


def test_scatter_plan_checks_once_and_launches_many():
    """A ScatterPlan refuses what the kernel cannot address, naming why, and a plan launched
    twice writes what two one-off item_kv_scatter calls write."""
    from recache_shim.kernels import ScatterPlan, item_kv_scatter

    H, D, BS, B, rows = 2, 64, 16, 8, 40
    gen = torch.Generator().manual_seed(3)
    pool = [torch.randn(rows, H, D, generator=gen).to(torch.bfloat16) for _ in range(2)]
    kv = torch.zeros(B, BS, H, 2 * D, dtype=torch.bfloat16)
    k, v = kv_views(kv.permute(0, 2, 1, 3), D)
    bad = {
        "one tensor per layer": ([pool[0]], pool, [k], [v]),
        "pool rows must be contiguous": ([pool[0].transpose(0, 1).contiguous().transpose(0, 1)],
                                         [pool[1]], [k], [v]),
        "unsupported KV dtype": ([p.float() for p in pool[:1]], [pool[1].float()],
                                 [k.float()], [v.float()]),
        "head vectors must be contiguous": ([pool[0]], [pool[1]], [k.transpose(2, 3)[..., :H]],
                                            [v]),
    }
    for why, args in bad.items():
        try:
            ScatterPlan(*args)
        except ValueError as e:
            assert why in str(e), (why, e)
        else:
            raise AssertionError(f"ScatterPlan accepted a case that should fail: {why}")
    i32 = dict(dtype=torch.int32)
    segs = [torch.tensor([0, 20], dtype=torch.int64), torch.tensor([10, 10], **i32),
            torch.tensor([0, 10], **i32), torch.tensor([0, 37], **i32),
            torch.randperm(B * BS, generator=gen)[:20]]
    rope = dict(stored_pos=0, rotary_dim=D, rope_theta=1e6, neox=True)
    plan = ScatterPlan([pool[0]], [pool[1]], [k], [v])
    plan.launch(*segs, **rope)
    plan.launch(*segs, **rope)  # idempotent: the same rows again
    once = kv.clone()
    kv.zero_()
    item_kv_scatter([pool[0]], [pool[1]], [k], [v], *segs, **rope)
    assert torch.equal(once, kv)
    sl = segs[4][:10]
    assert torch.equal(v[sl // BS, sl % BS], pool[1][:10])


def test_device_tier_takes_the_hottest_entry_and_loads_it_the_same():
    """With a device tier of one entry, the entry loaded most is promoted at a rebalance and
    then loaded from the tier (one launch for every layer), writing what the host path writes:
    V exact, K rotated to its position."""
    from recache_shim.paged_kv import PagedBackend

    blocks, n = 8, 6
    kvs = {name: torch.zeros(blocks, HEADS, BS, 2 * DIM, dtype=torch.bfloat16)
           for name in LAYERS}
    rope = RopeSpec(DIM, THETA)
    row = 2 * HEADS * DIM * 2 * len(LAYERS)
    b = PagedBackend(kvs, DIM, rope, pool_bytes=64 * row, tier_bytes=n * row, tier_every=2)
    assert b.tier is not None and b.tier.arena.capacity == n
    g = torch.Generator().manual_seed(5)
    for key in ("hot", "cold"):
        start = b.arena.alloc(n)
        b.arena.entries[key] = (start, n)
        for name in LAYERS:
            b.arena.k[name][start:start + n] = torch.randn(n, HEADS, DIM, generator=g).bfloat16()
            b.arena.v[name][start:start + n] = torch.randn(n, HEADS, DIM, generator=g).bfloat16()

    def load(key, pos, slots):
        b.load([NS(parts=[(key, 0, n, pos)], slots=slots)])
        b.commit([], [], False)

    load("hot", 0, list(range(n)))
    load("cold", 0, list(range(n)))  # second load: a rebalance, both seen once
    load("hot", 0, list(range(n)))
    load("hot", 0, list(range(n)))  # fourth: "hot" (now 1.5 vs 0.5) is promoted
    assert list(b.tier.entries) == ["hot"], b.tier.entries
    before = b.tier.tokens
    slots = [BS * 3 + i for i in range(n)]
    load("hot", 37, slots)
    assert b.tier.tokens == before + n
    load("cold", 37, [BS * 5 + i for i in range(n)])  # from the host arena
    assert b.tier.tokens == before + n
    for name, kv in kvs.items():
        k, v = _fa(kv)
        for key, blk in (("hot", 3), ("cold", 5)):
            s, _ = b.arena.entries[key]
            want = rope_shift(b.arena.k[name][s:s + n], 37, rope).float()
            got = k[blk, :n].float()
            assert (got - want).abs().max() <= 0.02 * want.abs().max(), (name, key)
            assert torch.equal(v[blk, :n], b.arena.v[name][s:s + n]), (name, key)
    b.commit([], ["hot"], False)  # evicted: gone from the tier too
    assert not b.tier.entries


if __name__ == "__main__":
    for name, fn in list(globals().items()):
        if name.startswith("test_"):
            fn()
            print(f"ok {name}")
