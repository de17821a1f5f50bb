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

import torch

from . import gr_plan as plan
from .gr_model import SHAPES, Model
from .kernels import ScatterPlan


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


class Pool:
    """Pooled items' K/V rows: a device tier and a host arena, each ``[slots, H, D]`` per
    layer, filled once by computing every item alone at position 0 (the precompute)."""

    def __init__(self, model: Model, items: list[tuple[str, int]], tier_bytes: int):
        s, dev = model.s, model.device
        row = s.kv_token_bytes(model.dtype)
        self.where: dict[str, tuple[str, int, int]] = {}  # item -> (tier|host, slot, tokens)
        used = {"tier": 0, "host": 0}
        for key, n in items:
            t = "tier" if (used["tier"] + n) * row <= tier_bytes else "host"
            self.where[key] = (t, used[t], n)
            used[t] += n
        self.tier_bytes, self.host_bytes = used["tier"] * row, used["host"] * row
        pin = dev.type == "cuda"

        def rows(n, on_dev):
            shape = (max(n, 1), s.kv_heads, s.head_dim)
            if on_dev:
                return [torch.zeros(shape, device=dev, dtype=model.dtype) for _ in range(s.layers)]
            return [torch.empty(shape, dtype=model.dtype, pin_memory=pin) for _ in range(s.layers)]

        self.k = {"tier": rows(used["tier"], True), "host": rows(used["host"], dev.type != "cuda")}
        self.v = {"tier": rows(used["tier"], True), "host": rows(used["host"], dev.type != "cuda")}

    def precompute(self, model: Model, chunk: int = 256) -> tuple[int, float]:
        """Computes every item alone (its own prompt at position 0) and stores its rows.
        Returns (tokens computed, seconds)."""
        keys = list(self.where)
        tokens, t0 = 0, time.perf_counter()
        for a in range(0, len(keys), chunk):
            part = keys[a:a + chunk]
            lens = [self.where[k][2] for k in part]
            block = max(lens)
            cache = model.cache(len(part), block)
            steps = [(n, n, [j]) for j, n in enumerate(lens)]
            ids = torch.randint(0, model.s.vocab, (sum(lens),))
            model.prefill(cache, steps, ids)
            for li in range(model.s.layers):
                kc, vc = model.kv(cache[li])
                for j, key in enumerate(part):
                    t, slot, n = self.where[key]
                    self.k[t][li][slot:slot + n].copy_(kc[j, :n])
                    self.v[t][li][slot:slot + n].copy_(vc[j, :n])
            tokens += sum(lens)
        _sync(model.device)
        return tokens, time.perf_counter() - t0


class Loader:
    """One batch's pooled loads through recache's scatter kernel (``kernels.ScatterPlan``)."""

    def __init__(self, model: Model, caches, pool: Pool):
        self.model, self.dev = model, model.device
        ks, vs = zip(*(model.kv(c) for c in caches))
        self.block = caches[0].shape[1]
        # Device tier: all layers in one launch. Host arena: one plan per layer (overlap).
        self.tier = ScatterPlan(pool.k["tier"], pool.v["tier"], list(ks), list(vs))
        self.host = [ScatterPlan([pool.k["host"][li]], [pool.v["host"][li]], [ks[li]], [vs[li]])
                     for li in range(model.s.layers)]
        self.pool = pool
        self.cuda = self.dev.type == "cuda"
        self.stream = torch.cuda.Stream(self.dev) if self.cuda else None
        self.events: dict[int, object] = {}

    def _args(self, steps, where):
        src, lens, offs, pos, slots = [], [], [], [], []
        for st in steps:
            table = st.table
            for item, off, n, p in st.loads:
                t, slot, _ = self.pool.where[item]
                if t != where:
                    continue
                src.append(slot + off)
                lens.append(n)
                offs.append(len(slots))
                pos.append(p)
                slots.extend(table[q // self.block] * self.block + q % self.block
                             for q in range(p, p + n))
        if not src:
            return None
        i32, i64 = dict(dtype=torch.int32), dict(dtype=torch.int64)
        host = [torch.tensor(src, **i64), torch.tensor(lens, **i32), torch.tensor(offs, **i32),
                torch.tensor(pos, **i32), torch.tensor(slots, **i64)]
        if not self.cuda:
            return host
        return [t.pin_memory().to(self.dev, non_blocking=True) for t in host]

    def launch(self, steps) -> None:
        s = self.model.s
        rope = dict(stored_pos=0, rotary_dim=s.head_dim, rope_theta=s.theta, neox=True)
        tier = self._args(steps, "tier")
        if tier is not None:  # on the forward's stream, before it
            self.tier.launch(*tier, **rope)
        if self.cuda:
            self.stream.wait_stream(torch.cuda.current_stream(self.dev))
            with torch.cuda.stream(self.stream):
                host = self._args(steps, "host")
        else:
            host = self._args(steps, "host")
        if host is None:
            return
        for li, p in enumerate(self.host):
            p.launch(*host, **rope, stream=self.stream.cuda_stream if self.cuda else None)
            if self.cuda:
                ev = torch.cuda.Event()
                ev.record(self.stream)
                self.events[li] = ev

    def wait_layer(self, li: int) -> None:
        ev = self.events.pop(li, None)
        if ev is not None:
            torch.cuda.current_stream(self.dev).wait_event(ev)


def run_mode(mode, header, lines, model, batch, budget, tier_share, samples, limit):
    """One mode at one batch size: its JSON row."""
    s, dev = model.s, model.device
    block = header.block_size
    block_bytes = block * s.kv_token_bytes(model.dtype)
    pool_set = set(header.pool_items) if mode == "bat-pool" else None
    reqs = plan.requests(lines.get(plan.MODES[mode], []), pool_set)[: limit or None]
    if not reqs:
        raise SystemExit(f"gr_replay: no {plan.MODES[mode]} lines in the replay file")
    pool, pre = None, (0, 0.0)
    if mode == "bat-pool":
        lens = {}
        for r in reqs:
            for p in r.parts[: r.pooled]:
                lens[p.ident[1]] = p.tokens
        common = max(set(lens.values()), key=list(lens.values()).count) if lens else 19
        items = [(k, lens.get(k, common)) for k in header.pool_items]
        pool = Pool(model, items, int(tier_share * budget))
        pre = pool.precompute(model)
    num_blocks = (budget - (pool.tier_bytes if pool else 0)) // block_bytes
    caches = model.cache(num_blocks, block)
    loader = Loader(model, caches, pool) if pool else None
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
        if loader:
            loader.launch(steps)
        model.prefill(caches, work, ids, loader.wait_layer if loader else None)
        _sync(dev)
        took = time.perf_counter() - a
        if loader and 1 <= bi <= samples:
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
                gpu_mem_bytes=kv + (pool.tier_bytes if pool else 0), engine_kv_bytes=kv,
                tier_bytes=pool.tier_bytes if pool else 0,
                host_pool_bytes=pool.host_bytes if pool else 0,
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
