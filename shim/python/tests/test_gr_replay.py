"""The GPU GR replay (``recache_shim.gr_replay``, ``gr_plan``, ``gr_project``) on CPU: the
``tiny`` shape, a small replay file written here in ``bench gr --replay-out``'s format, the
scatter kernel's CPU reference. Checks the plan's accounting (prefix hits, pooled loads, equal
memory), that pooled K/V land where the replay says at their positions' rotation, and that the
replay prints the contract's fields. Run with the testbed venv's Python and the shim library:

    RECACHE_SHIM_LIB=target/release/librecache_shim.so \\
      ~/.cache/recache-testbed/venv-vllm/bin/python shim/python/tests/test_gr_replay.py
"""

import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recache_shim import gr_plan as plan  # noqa: E402
from recache_shim import gr_replay  # noqa: E402
from recache_shim.gr_model import SHAPES, Model  # noqa: E402
from recache_shim.paged_kv import RopeSpec, rope_shift  # noqa: E402

CONTRACT = ("mode", "rps", "prefill_tokens", "exposed_load_share", "gpu_mem_bytes", "batch",
            "device")


def write_replay(path, requests=16, pool=24):
    """Users 0-5 (user 0 and 1 return), 8 candidates of 5 tokens from 40 items."""
    header = dict(header=True, workload="bat", seed=1, candidates=8, block_size=16,
                  kv_token_bytes=256, kv_bytes=1 << 20, equal_memory=True,
                  plain_kv_blocks=256, pooled_kv_blocks=128, pool_bytes=1 << 19,
                  pool_items=[str(i) for i in range(pool)])
    lines = [json.dumps(header)]
    for mode in ("up", "bat-admit"):
        for i in range(requests):
            user = i % 6 if i < 12 else i % 2
            items = [str((7 * i + 3 * k) % 40) for k in range(8)]
            kind = "user" if mode == "up" or user < 2 else "item"
            lines.append(json.dumps(dict(mode=mode, i=i, at_ms=i, user=str(user), kind=kind,
                                         user_tokens=40 + 8 * user, items=items,
                                         item_tokens=[5] * 8, tokens=40 + 8 * user + 40 + 6)))
    Path(path).write_text("\n".join(lines) + "\n")


def test_block_cache_hits_and_evicts():
    c = plan.BlockCache(4, 16)
    table, hit = c.admit([1, 2], 40)  # 3 blocks, the last one partial
    assert hit == 0 and len(table) == 3
    c.release([1, 2], table)
    t2, hit = c.admit([1, 2], 40)
    assert hit == 32 and t2[:2] == table[:2], (t2, table)
    c.release([1, 2], t2)
    t3, hit = c.admit([9, 8, 7], 64)  # needs 4: evicts the cached blocks, least recent first
    assert hit == 0 and len(t3) == 4
    assert c.admit([1], 16) is None  # everything is in use
    c.release([9, 8, 7], t3)
    assert c.admit([9], 16)[1] == 15  # a fully cached prompt recomputes its last token


def test_plan_accounts_every_token():
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "r.jsonl"
        write_replay(f)
        header, lines = plan.read(str(f))
        for mode, pool in (("up", None), ("bat-admit", set(header.pool_items))):
            reqs = plan.requests(lines[mode], pool)
            cache = plan.BlockCache(64, 16)
            got = dict(hit=0, loaded=0)
            for steps in plan.batches(reqs, cache, 4):
                for st in steps:
                    assert st.hit + st.loaded + st.computed == st.ctx
                    assert st.computed >= 1
                    got["hit"] += st.hit
                    got["loaded"] += st.loaded
                    cache.release(st.keys, st.table)
            assert got["hit"] > 0, (mode, got)  # returning users' profiles
            assert (got["loaded"] > 0) == (pool is not None), (mode, got)


def test_loads_land_rotated_at_their_positions():
    """Pooled rows placed through the connector's GPU path (one item in the device tier, one
    in the host arena) equal the arena rows rotated to the positions the plan gives them."""
    model = Model(SHAPES["tiny"], "cpu")
    s = model.s
    caches = model.cache(8, 16)
    pool, names, tokens, _ = gr_replay.pool_backend(model, caches, [("a", 5), ("b", 5)],
                                                    tier_bytes=5 * s.kv_token_bytes())
    assert tokens == 10 and list(pool.tier.entries) == ["a"], pool.tier.entries
    req = plan.Request(0, "item", [plan.Part(("item", "a"), 5), plan.Part(("item", "b"), 5),
                                   plan.Part(("user", "u"), 20)], pooled=2)
    step = plan.Step(req, [3, 6], 0, plan.plan_loads(req, 0), [])
    assert step.loads == [("a", 0, 5, 0), ("b", 0, 5, 5)]
    pool.load(gr_replay.load_ops([step], 16))
    pool.commit([], [], False)
    assert pool.tier.tokens == 5
    rope = RopeSpec(s.head_dim, s.theta)
    for li, name in enumerate(names):
        kc, vc = model.kv(caches[li])
        for item, _, n, p in step.loads:
            slot, _ = pool.arena.entries[item]
            want = rope_shift(pool.arena.k[name][slot:slot + n], p, rope)
            for j in range(n):
                q = p + j
                got = kc[step.table[q // 16], q % 16]
                assert torch.allclose(got.float(), want[j].float(), atol=2e-2), (li, item, j)
                assert torch.equal(vc[step.table[q // 16], q % 16],
                                   pool.arena.v[name][slot + j])


def test_replay_prints_the_contract():
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "r.jsonl"
        write_replay(f)
        rows = gr_replay.main(["--replay", str(f), "--model", "tiny", "--batch", "4",
                               "--gpu-kv-bytes", str(64 * 16 * SHAPES["tiny"].kv_token_bytes()),
                               "--device", "cpu", "--exposed-samples", "1"])
    by = {r["mode"]: r for r in rows}
    for r in rows:
        for k in CONTRACT:
            assert k in r, (k, r)
    up, bp = by["up"], by["bat-pool"]
    block = 16 * SHAPES["tiny"].kv_token_bytes()
    assert abs(up["gpu_mem_bytes"] - bp["gpu_mem_bytes"]) < block, (up, bp)
    # The same prompts in other layouts: every token computed, found or loaded, once.
    total = 16 * 86 + 8 * sum(i % 6 if i < 12 else i % 2 for i in range(16))
    assert up["prefill_tokens"] + up["hit_tokens"] == total, up
    assert bp["prefill_tokens"] + bp["hit_tokens"] + bp["loaded_tokens"] == total, bp
    assert bp["loaded_tokens"] > 0 and bp["precompute_tokens"] == 24 * 5
    assert bp["exposed_load_share"] is not None and bp["tier_loaded_tokens"] > 0


if __name__ == "__main__":
    torch.manual_seed(0)
    for name, fn in list(globals().items()):
        if name.startswith("test_") and callable(fn):
            fn()
            print(f"ok {name}")
