"""The item pool's SGLang backend (``recache_shim.sglang_item_pool.RecacheItemLinker``) against
SGLang 0.5.23's real KV pool (``MHATokenToKVPool`` on CPU), no server: fills captured from a
finished request's slots, claims after the engine's own hit, loads written layer by layer,
``pos`` re-rotation, refusals (other tokens, wrong slot counts, no claim), an eviction between
lookup and load, the report, reset keeping the pool and ``clear`` emptying it, and what
disables it. The live engine's checks are tests/tests/engine_sglang_item_pool.rs. Run with the
SGLang venv's Python:

    ~/.cache/recache-testbed/venv-sglang/bin/python shim/python/tests/test_sglang_item_pool.py
"""

import json
import sys
from pathlib import Path
from types import SimpleNamespace as NS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402

from recache_shim import sglang_item_pool as sip  # noqa: E402
from recache_shim.paged_kv import RopeSpec, rope_shift  # noqa: E402

L, H, D, SIZE = 3, 2, 32, 512  # int4 packs heads of 32 dims
torch.manual_seed(0)


def make(extra=None, tp_size=1):
    kv = MHATokenToKVPool(SIZE, 1, torch.bfloat16, H, D, L, "cpu", False)
    params = NS(token_to_kv_pool_allocator=NS(get_kvcache=lambda: kv), page_size=1)
    args = NS(model_path="/nonexistent", tp_size=tp_size)
    linker = sip.RecacheItemLinker(args, params, components={ComponentType.FULL},
                                   extra_config=extra or {"pool_bytes": 1 << 20})
    return linker, kv


def req(rid, tokens, plan, slot_row=0):
    custom = {"recache_pool": json.dumps(plan)} if plan is not None else None
    return NS(rid=rid, origin_input_ids=list(tokens), customized_info=None,
              sampling_params=NS(custom_params=custom), finished=lambda: True,
              kv=NS(holds_kv=True, kv_committed_len=len(tokens), req_pool_idx=slot_row))


def fill(linker, kv, key, tokens, at):
    """A fill request computed at slots at..at+n: random rows written there, then released."""
    n = len(tokens)
    slots = torch.arange(at, at + n)
    for layer in range(L):
        kv.k_buffer[layer][slots] = torch.randn(n, H, D).to(torch.bfloat16)
        kv.v_buffer[layer][slots] = torch.randn(n, H, D).to(torch.bfloat16)
    tree = NS(req_to_token_pool=NS(req_to_token=slots[None].to(torch.int32)))
    r = req(f"fill-{key}", tokens, {"fill": key})
    linker.on_release(r, tree)
    return [(kv.k_buffer[layer][slots].clone(), kv.v_buffer[layer][slots].clone())
            for layer in range(L)], r


def claim(linker, rid, prompt, plan, hit=0):
    r = req(rid, prompt, plan)
    linker.note(r, hit)
    tail = len(prompt) - 1 - hit
    return r, linker.lookup(rid, [PoolTransfer(name=PoolName.KV, keys=["h"] * tail)])


def load(linker, rid, at, n):
    ok = linker.load(rid, [PoolTransfer(name=PoolName.KV, device_indices=torch.arange(at, at + n),
                                        keys=["h"] * n)])
    if ok:
        idx = linker.start_layer_wise_loading()
        assert idx >= 0 and linker.finish_layer_wise_loading(idx)
    return ok


A, B = [256] + list(range(500, 510)), [257] + list(range(600, 605))  # 11 and 6 tokens


def test_fill_then_load_round_trip_and_report():
    linker, kv = make()
    rows_a, fa = fill(linker, kv, "m/a", A, 0)
    rows_b, _ = fill(linker, kv, "m/b", B, 20)
    assert fa.customized_info["recache_pool"][0]["present"] == ["m/a"]
    prompt = A + B + [900, 901, 902]
    segs = [["m/a", 0, len(A)], ["m/b", len(A), len(B)]]
    r, pages = claim(linker, "r1", prompt, {"segments": segs})
    assert pages == [len(A) + len(B)], pages
    assert load(linker, "r1", 100, len(A) + len(B))
    for layer in range(L):
        want_k = torch.cat([rows_a[layer][0], rows_b[layer][0]])
        assert torch.equal(kv.k_buffer[layer][100:100 + len(A) + len(B)], want_k)
        assert torch.equal(kv.v_buffer[layer][100:100 + len(A)], rows_a[layer][1])
    linker.on_release(r, NS())
    report = r.customized_info["recache_pool"][0]
    assert report["loaded_tokens"] == len(A) + len(B) and report["present"] == ["m/a", "m/b"]
    assert report["stores"] == 2 and report["total_loaded_tokens"] == len(A) + len(B)


def test_claims_continue_the_engines_hit_and_stop_at_what_is_missing():
    linker, kv = make()
    rows_a, _ = fill(linker, kv, "m/a", A, 0)
    prompt = A + B + [900]
    segs = [["m/a", 0, len(A)], ["m/b", len(A), len(B)]]  # m/b never filled
    _, pages = claim(linker, "r", prompt, {"segments": segs}, hit=4)
    assert pages == [len(A) - 4], pages  # after the engine's 4 tokens, up to the missing item
    assert load(linker, "r", 200, len(A) - 4)
    assert torch.equal(kv.k_buffer[1][200:200 + len(A) - 4], rows_a[1][0][4:])


def test_pos_re_rotates_k_only():
    linker, kv = make()
    linker.rope = RopeSpec(D, 10000.0)
    rows_a, _ = fill(linker, kv, "m/a", A, 0)
    prompt = [7] * 32 + A + [900]
    _, pages = claim(linker, "r", prompt, {"segments": [["m/a", 32, len(A), 32]]}, hit=32)
    assert pages == [len(A)]
    assert load(linker, "r", 300, len(A))
    want = rope_shift(rows_a[0][0], 32, linker.rope).to(torch.bfloat16)
    assert torch.equal(kv.k_buffer[0][300:300 + len(A)], want)
    assert torch.equal(kv.v_buffer[0][300:300 + len(A)], rows_a[0][1])
    linker.rope = None  # without the model's RoPE a pos segment is computed, not loaded
    _, pages = claim(linker, "r2", prompt, {"segments": [["m/a", 32, len(A), 32]]}, hit=32)
    assert pages == []


def test_two_requests_load_in_one_step_each_into_its_own_slots():
    linker, kv = make()
    linker.rope = RopeSpec(D, 10000.0)
    rows_a, _ = fill(linker, kv, "m/a", A, 0)
    rows_b, _ = fill(linker, kv, "m/b", B, 20)
    _, p1 = claim(linker, "r1", A + B + [1], {"segments": [["m/a", 0, len(A)], ["m/b", len(A), len(B)]]})
    _, p2 = claim(linker, "r2", [7] * 5 + B + [1], {"segments": [["m/b", 5, len(B), 5]]}, hit=5)
    assert p1 == [len(A) + len(B)] and p2 == [len(B)]
    assert linker.load("r1", [PoolTransfer(name=PoolName.KV, device_indices=torch.arange(100, 117),
                                           keys=["h"] * 17)])
    assert linker.load("r2", [PoolTransfer(name=PoolName.KV, device_indices=torch.arange(200, 206),
                                           keys=["h"] * 6)])
    idx = linker.start_layer_wise_loading()  # both pending: one gather, each to its slots
    assert idx >= 0 and linker.finish_layer_wise_loading(idx)
    for layer in range(L):
        assert torch.equal(kv.k_buffer[layer][100:117], torch.cat([rows_a[layer][0], rows_b[layer][0]]))
        assert torch.equal(kv.v_buffer[layer][100:117], torch.cat([rows_a[layer][1], rows_b[layer][1]]))
        want = rope_shift(rows_b[layer][0], 5, linker.rope).to(torch.bfloat16)
        assert torch.equal(kv.k_buffer[layer][200:206], want)
        assert torch.equal(kv.v_buffer[layer][200:206], rows_b[layer][1])


def test_row_writes_by_runs_or_by_index_equal_an_indexed_write():
    for slots, scattered in ((torch.arange(40, 90), False),
                             (torch.cat([torch.arange(5, 9), torch.arange(60, 100)]), False),
                             (torch.randperm(SIZE)[:50], True), (torch.tensor([], dtype=torch.long), False)):
        buf, want = torch.zeros(SIZE, H, D).bfloat16(), torch.zeros(SIZE, H, D).bfloat16()
        rows = torch.randn(len(slots), L, H, D).bfloat16()[:, 1]  # strided, as a gather's layer
        want[slots] = rows
        runs = sip.slot_runs(slots)
        assert (runs is None) == scattered  # scattered: an indexed write
        sip.write_rows(buf, slots, runs, rows)
        assert torch.equal(buf, want)


def test_refusals_claim_nothing():
    linker, kv = make()
    fill(linker, kv, "m/a", A, 0)
    other = [256] + list(range(700, 710))
    _, pages = claim(linker, "t", other + [1, 2], {"segments": [["m/a", 0, len(A)]]})
    assert pages == []  # resident, but for other tokens
    _, pages = claim(linker, "g", A + [1, 2], {"segments": [["x"], 5]})
    assert pages == []  # malformed segments
    _, pages = claim(linker, "n", A + [1, 2], None)
    assert pages == []  # no plan
    assert linker.lookup("never-noted", None) == []  # never raises
    _, pages = claim(linker, "s", A + [1, 2], {"segments": [["m/a", 0, len(A)]]})
    assert pages == [len(A)] and not load(linker, "s", 0, len(A) - 1)  # other slot count
    assert not load(linker, "s", 0, len(A))  # the claim was consumed
    assert linker.start_layer_wise_loading() == -1


def test_an_eviction_between_lookup_and_load_still_loads_the_claimed_rows():
    linker, kv = make()
    rows_a, _ = fill(linker, kv, "m/a", A, 0)
    _, pages = claim(linker, "r", A + [1], {"segments": [["m/a", 0, len(A)]]})
    assert pages == [len(A)]
    claim(linker, "other", [5, 6, 7], {"evict": ["m/a"]})  # applied on arrival
    assert linker.store.get("m/a") is None and "m/a" not in linker.sched.index
    assert load(linker, "r", 400, len(A))
    assert torch.equal(kv.k_buffer[2][400:400 + len(A)], rows_a[2][0])
    _, pages = claim(linker, "r3", A + [1], {"segments": [["m/a", 0, len(A)]]})
    assert pages == []


def test_reset_keeps_the_pool_and_clear_empties_it():
    linker, kv = make()
    fill(linker, kv, "m/a", A, 0)
    linker.reset()
    _, pages = claim(linker, "r", A + [1], {"segments": [["m/a", 0, len(A)]]})
    assert pages == [len(A)]
    claim(linker, "c", [0], {"list": True, "clear": True})
    assert not linker.store.entries and not linker.sched.index


def test_int4_codec_keeps_more_items_in_the_same_bytes():
    linker, kv = make({"pool_bytes": 1 << 20, "pool_codec": "int4"})
    rows_a, _ = fill(linker, kv, "m/a", A, 0)
    assert linker.sched.index["m/a"][1] < sum(t.numel() * 2 for pair in rows_a for t in pair)
    _, pages = claim(linker, "r", A + [1], {"segments": [["m/a", 0, len(A)]]})
    assert pages == [len(A)] and load(linker, "r", 100, len(A))
    err = (kv.k_buffer[0][100:100 + len(A)].float() - rows_a[0][0].float()).abs().max()
    assert err < 0.5, err  # int4 steps, not garbage


def test_what_it_cannot_serve_disables_it():
    linker, _ = make({"pool_bytes": 1 << 20}, tp_size=2)
    assert linker.disabled and "tensor parallelism" in linker.disabled
    linker.note(req("r", A + [1], {"segments": [["m/a", 0, len(A)]]}), 0)
    assert linker.lookup("r", [PoolTransfer(name=PoolName.KV, keys=["h"] * len(A))]) == []
    try:
        make({"pool_codec": "int3"})
    except ValueError as e:
        assert "int3" in str(e)
    else:
        raise AssertionError("an unknown codec must be refused")


def test_extend_attention_after_a_prefix_equals_sglangs_padded_pass():
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from recache_shim import sglang_extend_attn as ext

    original = getattr(TorchNativeAttnBackend, "_recache_original", None) or \
        TorchNativeAttnBackend._run_sdpa_forward_extend
    heads, kv_heads, dim, slots = 4, 2, 32, 400
    kc = torch.randn(slots, kv_heads, dim).to(torch.bfloat16)
    vc = torch.randn(slots, kv_heads, dim).to(torch.bfloat16)
    r2t = torch.randperm(slots)[:300].reshape(2, 150)
    prefix, new = torch.tensor([40, 0]), torch.tensor([60, 90])  # one after a prefix, one whole
    q = torch.randn(int(new.sum()), heads, dim).to(torch.bfloat16)
    args = (kc, vc, r2t, torch.tensor([0, 1]), prefix + new, prefix, new)
    want, got = torch.zeros_like(q), torch.zeros_like(q)
    original(None, q, want, *args, None, scaling=dim ** -0.5, enable_gqa=True, causal=True)
    ext.extend_only(q, got, *args, scaling=dim ** -0.5, enable_gqa=True, causal=True)
    assert (want.float() - got.float()).abs().max() < 0.02  # bf16 rounding of the merge
    assert ext.install() and ext.install()  # idempotent


if __name__ == "__main__":
    from testkit import run_all

    run_all(globals())
