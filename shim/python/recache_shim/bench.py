"""Device benchmark: ``python -m recache_shim.bench [--device N]`` prints JSON.

- scatter: item-KV scatter + RoPE (Qwen2-1.5B shapes: 28 layers, 2 KV heads,
  head dim 128, bf16; 100 and 1000 items x 18 tokens) effective bandwidth
  (bytes read + written) against a measured device-to-device copy
  (``Tensor.copy_``, bytes read + written). Goal: ratio >= 0.70.
- beam: constrained beam top-k at BW = K = 512 over a 151936-token vocab
  (3-level semantic ids, codebook 256, 200k items; beams one level deep)
  against ``torch.topk`` over the full BW x vocab scores, and against a
  masked ``torch.topk`` with a prebuilt mask. Goal: >= 3x faster than the
  full top-k. Also checks that the selected scores equal the masked top-k's.

Without torch or a GPU it prints ``{"skipped": reason}`` and exits 2.
"""

import argparse
import json
import random
import sys


def timed(torch, fn, iters=50, warmup=5):
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters  # ms


def bench_copy(torch, dev):
    n = 512 << 20
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    ms = timed(torch, lambda: b.copy_(a), iters=20)
    return 2 * n / (ms * 1e-3) / 1e9


def bench_scatter(torch, dev, items, copy_gbs):
    from recache_shim import item_kv_scatter

    L, H, D, T, BS = 28, 2, 128, 18, 16
    pool_items, blocks = 2000, 8192
    mk = lambda *s: torch.randn(*s, dtype=torch.bfloat16, device=dev)  # noqa: E731
    src_k = [mk(pool_items * T, H, D) for _ in range(L)]
    src_v = [mk(pool_items * T, H, D) for _ in range(L)]
    dst_k = [torch.zeros(blocks, BS, H, D, dtype=torch.bfloat16, device=dev) for _ in range(L)]
    dst_v = [torch.zeros(blocks, BS, H, D, dtype=torch.bfloat16, device=dev) for _ in range(L)]
    i64 = dict(dtype=torch.int64, device=dev)
    i32 = dict(dtype=torch.int32, device=dev)
    seg_src = (torch.randperm(pool_items, **i64)[:items] * T).contiguous()
    seg_len = torch.full((items,), T, **i32)
    seg_off = torch.arange(items, **i32) * T
    seg_pos = torch.randint(0, 4096, (items,), **i32)
    slots = torch.randperm(blocks * BS, **i64)[: items * T].contiguous()
    run = lambda: item_kv_scatter(src_k, src_v, dst_k, dst_v, seg_src, seg_len, seg_off, seg_pos, slots,  # noqa: E731
                                  stored_pos=0, rotary_dim=D, rope_theta=1e6, neox=True)
    ms = timed(torch, run)
    moved = L * items * T * H * D * 2 * 2 * 2  # bf16, K+V, read+write
    gbs = moved / (ms * 1e-3) / 1e9
    return {"items": items, "tokens": items * T, "ms": ms, "effective_GBps": gbs,
            "ratio_vs_copy": gbs / copy_gbs, "goal_ratio": 0.70, "meets_goal": gbs / copy_gbs >= 0.70}


def build_trie(n_items, codebook, levels, seed=0):
    rng = random.Random(seed)
    kids = [dict()]
    for _ in range(n_items):
        node = 0
        for lvl in range(levels):
            t = lvl * codebook + rng.randrange(codebook)
            nxt = kids[node].get(t)
            if nxt is None:
                nxt = len(kids)
                kids[node][t] = nxt
                kids.append(dict())
            node = nxt
    row_ptr, tok, child = [0], [], []
    for k in kids:
        for t in sorted(k):
            tok.append(t)
            child.append(k[t])
        row_ptr.append(len(tok))
    return row_ptr, tok, child, kids


def bench_beam(torch, dev):
    from recache_shim import beam_topk

    BW, V = 512, 151936
    row_ptr, tok, child, kids = build_trie(200_000, 256, 3)
    level1 = list(kids[0].values())
    rng = random.Random(1)
    nodes = [rng.choice(level1) for _ in range(BW)]
    i32 = dict(dtype=torch.int32, device=dev)
    trie = (torch.tensor(row_ptr, **i32), torch.tensor(tok, **i32), torch.tensor(child, **i32))
    beam_node = torch.tensor(nodes, **i32)
    log_probs = torch.log_softmax(torch.randn(BW, V, device=dev), dim=-1)
    beam_scores = torch.randn(BW, device=dev) - 5.0
    mask = torch.zeros(BW, V, dtype=torch.bool, device=dev)
    for b, n in enumerate(nodes):
        mask[b, trie[1][row_ptr[n]:row_ptr[n + 1]].long()] = True
    ws = torch.empty(BW * BW * 8, dtype=torch.uint8, device=dev)
    ours = lambda: beam_topk(log_probs, beam_scores, beam_node, trie, per_beam_k=BW, workspace=ws)  # noqa: E731
    full = lambda: (beam_scores[:, None] + log_probs).view(-1).topk(BW)  # noqa: E731
    masked = lambda: (beam_scores[:, None] + log_probs).masked_fill(~mask, float("-inf")).view(-1).topk(BW)  # noqa: E731
    t_ours, t_full, t_masked = timed(torch, ours), timed(torch, full), timed(torch, masked)
    parent, token, score, node, visited = beam_topk(log_probs, beam_scores, beam_node, trie,
                                                    per_beam_k=BW, count_visited=True)
    ref = masked().values
    same = bool(torch.equal(torch.sort(score).values, torch.sort(ref).values))
    return {"beam_width": BW, "per_beam_k": BW, "vocab": V, "recache_ms": t_ours,
            "torch_topk_full_ms": t_full, "torch_topk_masked_ms": t_masked,
            "speedup_vs_full": t_full / t_ours, "speedup_vs_masked": t_masked / t_ours,
            "goal_speedup": 3.0, "meets_goal": t_full / t_ours >= 3.0,
            "candidates_total": int(mask.sum()), "candidates_examined": int(visited.item()),
            "scores_match_masked_topk": same}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        import torch
    except ImportError as e:
        print(json.dumps({"skipped": f"torch not importable: {e}"}))
        return 2
    from recache_shim import kernels_available, unavailable_reason

    if not torch.cuda.is_available() or not kernels_available(args.device):
        reason = unavailable_reason(args.device) if torch.cuda.is_available() else "no CUDA device"
        print(json.dumps({"skipped": reason}))
        return 2
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    copy_gbs = bench_copy(torch, dev)
    out = {
        "device": torch.cuda.get_device_name(dev),
        "d2d_copy_GBps": copy_gbs,
        "scatter": [bench_scatter(torch, dev, n, copy_gbs) for n in (100, 1000)],
        "beam_topk": bench_beam(torch, dev),
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
