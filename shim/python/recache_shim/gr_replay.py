"""``python -m recache_shim.gr_replay``: BAT's headline on a GPU without vLLM. Replays the GR
prompts ``recache bench gr --trace-only --replay-out FILE`` wrote, at a real model's shapes
(random weights, ``gr_model``), two ways at equal GPU memory (``gr_plan``):

- ``up``: every prompt user-first, the whole prompt prefilled but for the engine's prefix hits;
- ``bat-pool``: BAT's layouts with the item pool: pooled items' K/V placed by recache's scatter
  kernel (RoPE re-rotated to their positions) from a device tier (one launch for all layers,
  on the forward's stream before it starts) or the pinned host arena (one launch per layer on a
  side stream, each layer's forward waiting for its own), the rest prefilled against them.

Batches of ``--batch`` requests, in stream order, as an engine at saturation. Prints one JSON
row per mode and batch size (``mode``, ``rps``, ``prefill_tokens``, ``exposed_load_share``,
``gpu_mem_bytes``, ``batch``, ``device``, ...), then with ``--project`` the same runs priced by
``project`` from rates measured on this device, against what was measured.

    python -m recache_shim.gr_replay --replay replay.jsonl --model qwen2-1.5b --batch 8,32 \\
      --gpu-kv-bytes 16e9 --project

``exposed_load_share``: on ``--exposed-samples`` batches per run, the step is run again
without its loads; (with - without) over without, summed. CPU (tests): the scatter kernel's CPU
reference, no streams, the ``tiny`` shape.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from types import SimpleNamespace

import torch

from . import gr_plan as plan
from .gr_model import SHAPES, Model
from .paged_kv import PagedBackend, RopeSpec


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def pool_backend(model: Model, caches, items: list[tuple[str, int]], tier_bytes: int):
    """The item pool connector's GPU path (``paged_kv.PagedBackend``) on the replay's cache:
    a pinned host arena holding every item and a ``DeviceTier`` of ``tier_bytes``, filled by
    computing every item alone at position 0 (the precompute) and its tier seeded from the
    items' order (most valuable first). Returns (backend, tokens computed, seconds)."""
    s, dev = model.s, model.device
    names = [f"layer{li}" for li in range(s.layers)]
    row = s.kv_token_bytes(model.dtype)
    total = sum(n for _, n in items)
    b = PagedBackend({n: c.permute(0, 2, 1, 3) for n, c in zip(names, caches)}, s.head_dim,
                     RopeSpec(s.head_dim, s.theta), (total + 1) * row,
                     tier_bytes=min(tier_bytes, total * row))
    t0 = time.perf_counter()
    by_len: dict[int, list[str]] = {}
    for key, n in items:
        by_len.setdefault(n, []).append(key)
    for n, keys in by_len.items():
        for a in range(0, len(keys), 1024):
            part = keys[a:a + 1024]
            kv = model.alone(torch.randint(0, s.vocab, (len(part), n)))
            start = b.arena.alloc(n * len(part))  # one run: the part's entries in order
            for j, key in enumerate(part):
                b.arena.entries[key] = (start + j * n, n)
            for name, (k, v) in zip(names, kv):
                b.arena.k[name][start:start + n * len(part)].copy_(k.reshape(-1, *k.shape[2:]))
                b.arena.v[name][start:start + n * len(part)].copy_(v.reshape(-1, *v.shape[2:]))
    _sync(dev)
    took = time.perf_counter() - t0
    if b.tier is not None:
        b.tier.seed([k for k, _ in items])
        _sync(dev)
    return b, names, total, took


def load_ops(steps, block: int):
    """The connector's load operations for a batch: per request its pooled parts and slots."""
    ops = []
    for st in steps:
        if not st.loads:
            continue
        slots = [st.table[q // block] * block + q % block
                 for _, _, n, p in st.loads for q in range(p, p + n)]
        ops.append(SimpleNamespace(parts=list(st.loads), slots=slots))
    return ops


def run_mode(mode, header, lines, model, batch, budget, tier_share, samples, limit):
    """One mode at one batch size: its JSON row."""
    s, dev = model.s, model.device
    block = header.block_size
    block_bytes = block * s.kv_token_bytes(model.dtype)
    pool_set = set(header.pool_items) if mode == "bat-pool" else None
    reqs = plan.requests(lines.get(plan.MODES[mode], []), pool_set)[: limit or None]
    if not reqs:
        raise SystemExit(f"gr_replay: no {plan.MODES[mode]} lines in the replay file")
    pool, names, pre = None, [], (0, 0.0)
    tier_bytes = 0
    items = []
    if mode == "bat-pool":
        lens = {}
        for r in reqs:
            for p in r.parts[: r.pooled]:
                lens[p.ident[1]] = p.tokens
        common = max(set(lens.values()), key=list(lens.values()).count) if lens else 19
        items = [(k, lens.get(k, common)) for k in header.pool_items]
        row = s.kv_token_bytes(model.dtype)
        tier_bytes = min(int(tier_share * budget), sum(n for _, n in items) * row)
    num_blocks = (budget - tier_bytes) // block_bytes
    caches = model.cache(num_blocks, block)
    if items:
        pool, names, *pre = pool_backend(model, caches, items, tier_bytes)
    cache = plan.BlockCache(num_blocks, block)
    tok = dict(computed=0, hit=0, loaded=0)
    with_l = without_l = 0.0
    n_batches = 0
    # Warm-up (kernels loaded, allocator grown) before the clock starts.
    model.prefill(model.cache(1, block), [(block, block, [0])], torch.randint(0, s.vocab, (block,)))
    _sync(dev)
    t0 = time.perf_counter()
    paused = 0.0
    for bi, steps in enumerate(plan.batches(reqs, cache, batch)):
        work = [(st.computed, st.ctx, st.table) for st in steps]
        ids = torch.randint(0, s.vocab, (sum(w[0] for w in work),))
        a = time.perf_counter()
        wait = None
        if pool is not None:
            pool.load(load_ops(steps, block))
            wait = lambda li: pool.wait_layer(names[li])  # noqa: E731
        model.prefill(caches, work, ids, wait)
        if pool is not None:
            pool.commit([], [], False)  # end of the step: loads done, the tier rebalanced
        _sync(dev)
        took = time.perf_counter() - a
        if pool is not None and 1 <= bi <= samples:
            # The same step again without its loads, off the clock.
            b = time.perf_counter()
            model.prefill(caches, work, ids)
            _sync(dev)
            again = time.perf_counter() - b
            paused += again
            with_l, without_l = with_l + took, without_l + again
        for st in steps:
            tok["computed"] += st.computed
            tok["hit"] += st.hit
            tok["loaded"] += st.loaded
            cache.release(st.keys, st.table)
        n_batches += 1
    wall = time.perf_counter() - t0 - paused
    kv = num_blocks * block_bytes
    return dict(mode=mode, batch=batch, requests=len(reqs), rps=round(len(reqs) / wall, 3),
                wall_s=round(wall, 3), steps=n_batches, prefill_tokens=tok["computed"],
                hit_tokens=tok["hit"], loaded_tokens=tok["loaded"],
                exposed_load_share=(round(max(with_l - without_l, 0.0) / without_l, 4)
                                    if without_l else (0.0 if mode == "up" else None)),
                gpu_mem_bytes=kv + tier_bytes, engine_kv_bytes=kv, tier_bytes=tier_bytes,
                tier_loaded_tokens=pool.tier.tokens if pool is not None and pool.tier else 0,
                host_pool_bytes=pool.arena.capacity * pool.arena.row_bytes * 2 * s.layers
                if pool is not None else 0,
                precompute_tokens=pre[0], precompute_s=round(pre[1], 3))


def device_name(dev) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replay", required=True, help="bench gr --replay-out's file")
    ap.add_argument("--model", default="qwen2-1.5b", choices=sorted(SHAPES))
    ap.add_argument("--modes", default="up,bat-pool")
    ap.add_argument("--batch", default="8,32", help="requests per prefill step (comma list)")
    ap.add_argument("--gpu-kv-bytes", type=float, required=True,
                    help="GPU KV bytes of every mode: engine cache (+ device tier)")
    ap.add_argument("--tier-share", type=float, default=None,
                    help="bat-pool: share of --gpu-kv-bytes for the device tier [default: the "
                         "pool's share of the header's split, BAT's frequency-per-byte rule]")
    ap.add_argument("--requests", type=int, default=0, help="first N requests (0: all)")
    ap.add_argument("--exposed-samples", type=int, default=3)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--project", action="store_true",
                    help="also price every run from rates measured here (recache_shim.gr_project)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    header, lines = plan.read(a.replay)
    share = a.tier_share if a.tier_share is not None else (
        header.pool_bytes / header.kv_bytes if header.kv_bytes else 0.0)
    model = Model(SHAPES[a.model], a.device, seed=a.seed)
    name = device_name(model.device)
    rows = []
    for batch in [int(b) for b in a.batch.split(",")]:
        for mode in a.modes.split(","):
            row = run_mode(mode, header, lines, model, batch, int(a.gpu_kv_bytes), share,
                           a.exposed_samples, a.requests)
            row.update(device=name, model=a.model)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.project:
        from . import gr_project
        for row in gr_project.check(model, header, lines, rows, a.requests):
            print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
