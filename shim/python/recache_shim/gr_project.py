"""What the item pool would gain on a given GPU and model, priced without running the prompts:
the replay's plan (``gr_plan``: tokens computed, context lengths, pooled loads per step) at
four rates: GEMM FLOP/s for the projections and MLP, attention FLOP/s, bytes/s of loads from
the device tier (exposed: on the forward's stream) and a fixed cost per request and step.
``gr_replay --project`` measures the rates on the device it runs on and prints each run's
projection next to its measurement; without a device, give the rates of yours:

    python -m recache_shim.gr_project --replay replay.jsonl --model qwen2-7b \\
      --gpu-kv-bytes 40e9 --batch 32 --gemm-tflops 600 --attn-tflops 300 --load-gbps 3000 \\
      --request-ms 0.5
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

from . import gr_plan as plan
from .gr_model import SHAPES, Shape


def _time(fn, dev, reps=5) -> float:
    fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return (time.perf_counter() - t) / reps


def measure_rates(model) -> dict:
    """The four rates on ``model``'s device, from small benchmarks of the same operations."""
    s, dev, dt = model.s, model.device, model.dtype
    n = 4096 if dev.type == "cuda" else 256
    x = torch.randn(n, s.hidden, device=dev, dtype=dt)
    w = torch.randn(s.hidden, 2 * s.ffn, device=dev, dtype=dt)
    gemm = 2.0 * n * s.hidden * 2 * s.ffn / _time(lambda: x @ w, dev)
    q_len, ctx = (1024, 4096) if dev.type == "cuda" else (64, 256)
    q = torch.randn(1, s.heads, q_len, s.head_dim, device=dev, dtype=dt)
    kv = torch.randn(1, s.heads, ctx, s.head_dim, device=dev, dtype=dt)
    m = torch.ones(q_len, ctx, dtype=torch.bool, device=dev).tril(ctx - q_len)
    t = _time(lambda: F.scaled_dot_product_attention(q, kv, kv, attn_mask=m), dev)
    attn = s.attn_flops(q_len, ctx) / s.layers / t
    src = torch.randn(64 << 20 if dev.type == "cuda" else 1 << 20, device=dev, dtype=dt)
    dst = torch.empty_like(src)
    load = 2.0 * src.numel() * src.element_size() / _time(lambda: dst.copy_(src), dev)
    block = 16
    cache = model.cache(64, block)
    ids = torch.randint(0, s.vocab, (32,))
    per = _time(lambda: model.prefill(cache, [(1, 1, [j]) for j in range(32)], ids), dev, 3)
    one = _time(lambda: model.prefill(cache, [(1, 1, [0])], ids[:1]), dev, 3)
    return dict(gemm_flops=gemm, attn_flops=attn, load_bytes_s=load,
                request_s=max(per - one, 0.0) / 31)


def price(shape: Shape, header, lines, mode, batch, budget, share, rates, limit=0) -> dict:
    """The projected seconds and requests/s of one (mode, batch) run."""
    row_bytes = shape.kv_token_bytes()
    block = header.block_size
    pool_set = set(header.pool_items) if mode == "bat-pool" else None
    reqs = plan.requests(lines.get(plan.MODES[mode], []), pool_set)[: limit or None]
    tier = set()
    if mode == "bat-pool":
        used, cap = 0, int(share * budget)
        lens = {p.ident[1]: p.tokens for r in reqs for p in r.parts[: r.pooled]}
        for k in header.pool_items:
            n = lens.get(k, 19)
            if (used + n) * row_bytes > cap:
                break
            tier.add(k)
            used += n
        budget -= used * row_bytes
    cache = plan.BlockCache(budget // (block * row_bytes), block)
    secs = dict(gemm=0.0, attn=0.0, load=0.0, request=0.0)
    for steps in plan.batches(reqs, cache, batch):
        new = sum(st.computed for st in steps)
        secs["gemm"] += shape.linear_flops(new) / rates["gemm_flops"]
        secs["attn"] += sum(shape.attn_flops(st.computed, st.ctx) for st in steps) \
            / rates["attn_flops"]
        tier_tokens = sum(n for st in steps for it, _, n, _ in st.loads if it in tier)
        # The kernel reads and writes each tier byte; host-arena loads overlap the forward.
        secs["load"] += 2.0 * tier_tokens * row_bytes / rates["load_bytes_s"]
        secs["request"] += len(steps) * rates["request_s"]
        for st in steps:
            cache.release(st.keys, st.table)
    total = sum(secs.values())
    return dict(mode=mode, batch=batch, requests=len(reqs), projected_s=round(total, 4),
                projected_rps=round(len(reqs) / total, 3) if total else None,
                parts_s={k: round(v, 4) for k, v in secs.items()})


def check(model, header, lines, rows, limit=0) -> list[dict]:
    """Each measured row of ``gr_replay`` priced from rates measured here."""
    rates = measure_rates(model)
    out = [dict(projection="rates", **{k: float(f"{v:.4g}") for k, v in rates.items()})]
    for r in rows:
        budget = r["gpu_mem_bytes"]
        share = r["tier_bytes"] / budget if budget else 0.0
        p = price(model.s, header, lines, r["mode"], r["batch"], budget, share, rates, limit)
        err = (p["projected_rps"] - r["rps"]) / r["rps"] if p["projected_rps"] else None
        out.append(dict(projection=True, measured_rps=r["rps"], error=round(err, 4)
                        if err is not None else None,
                        within_15pct=err is not None and abs(err) <= 0.15, **p))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replay", required=True)
    ap.add_argument("--model", default="qwen2-1.5b", choices=sorted(SHAPES))
    ap.add_argument("--modes", default="up,bat-pool")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--gpu-kv-bytes", type=float, required=True)
    ap.add_argument("--tier-share", type=float, default=None)
    ap.add_argument("--gemm-tflops", type=float, required=True)
    ap.add_argument("--attn-tflops", type=float, required=True)
    ap.add_argument("--load-gbps", type=float, required=True)
    ap.add_argument("--request-ms", type=float, required=True)
    ap.add_argument("--requests", type=int, default=0)
    a = ap.parse_args(argv)
    header, lines = plan.read(a.replay)
    share = a.tier_share if a.tier_share is not None else (
        header.pool_bytes / header.kv_bytes if header.kv_bytes else 0.0)
    rates = dict(gemm_flops=a.gemm_tflops * 1e12, attn_flops=a.attn_tflops * 1e12,
                 load_bytes_s=a.load_gbps * 1e9, request_s=a.request_ms / 1e3)
    rows = [price(SHAPES[a.model], header, lines, m, int(b), int(a.gpu_kv_bytes), share, rates,
                  a.requests)
            for b in a.batch.split(",") for m in a.modes.split(",")]
    for r in rows:
        print(json.dumps(r))
    by = {(r["mode"], r["batch"]): r["projected_rps"] for r in rows}
    for b in a.batch.split(","):
        up, bp = by.get(("up", int(b))), by.get(("bat-pool", int(b)))
        if up and bp:
            print(json.dumps(dict(batch=int(b), bat_pool_over_up=round(bp / up, 3))))


if __name__ == "__main__":
    main()
