#!/usr/bin/env python3
"""What one pooled request's loads cost in recache's SGLang linker, without a server: SGLang's
real ``MHATokenToKVPool`` on CPU, 100 items of 19 tokens filled through ``on_release`` (as a
fill request finishes), then REPS requests that each claim and load all 1,900 pooled tokens
(``note``/``lookup``/``load``/``start_layer_wise_loading``, the scheduler's calls), timed per
request. Run with the SGLang venv's Python, one torch thread (the engine's scheduler thread):

    ~/.cache/recache-testbed/venv-sglang/bin/python examples/testbed/sglang_linker_load.py \
        [--shape tiny|qwen2-1.5b-shape] [--codec bf16|int8|int4] [--reps 200] [--pos]

Prints one JSON line: the median and p90 ms a request, and the shape. docs/engines.md ("The
item pool on both engines") reads it.
"""
import argparse
import json
import statistics as st
import sys
import time
from pathlib import Path
from types import SimpleNamespace as NS

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shim" / "python"))

import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType  # noqa: E402

from recache_shim import sglang_item_pool as sip  # noqa: E402
from recache_shim.paged_kv import RopeSpec  # noqa: E402

SHAPES = {"tiny": (4, 2, 64), "qwen2-1.5b-shape": (2, 2, 128)}  # layers, KV heads, head dim
ITEMS, ITEM_TOKENS = 100, 19


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", choices=SHAPES, default="tiny")
    ap.add_argument("--codec", default="bf16")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--pos", action="store_true", help="every item re-rotated by its own position")
    a = ap.parse_args()
    torch.set_num_threads(1)
    layers, heads, dim = SHAPES[a.shape]
    size = ITEMS * ITEM_TOKENS * 2 + 64
    kv = MHATokenToKVPool(size, 1, torch.bfloat16, heads, dim, layers, "cpu", False)
    params = NS(token_to_kv_pool_allocator=NS(get_kvcache=lambda: kv), page_size=1)
    linker = sip.RecacheItemLinker(NS(model_path="/nonexistent", tp_size=1), params,
                                   components={ComponentType.FULL},
                                   extra_config={"pool_bytes": 1 << 30, "pool_codec": a.codec,
                                                 "extend_attention": False})
    linker.rope = RopeSpec(dim, 10000.0)

    def req(rid, tokens, plan):
        return NS(rid=rid, origin_input_ids=list(tokens), customized_info=None,
                  sampling_params=NS(custom_params={"recache_pool": json.dumps(plan)}),
                  finished=lambda: True,
                  kv=NS(holds_kv=True, kv_committed_len=len(tokens), req_pool_idx=0))

    prompt, segs = [], []
    for i in range(ITEMS):
        toks = [1000 + i * ITEM_TOKENS + j for j in range(ITEM_TOKENS)]
        slots = torch.arange(0, ITEM_TOKENS)
        for layer in range(layers):
            kv.k_buffer[layer][slots] = torch.randn(ITEM_TOKENS, heads, dim).to(torch.bfloat16)
            kv.v_buffer[layer][slots] = torch.randn(ITEM_TOKENS, heads, dim).to(torch.bfloat16)
        tree = NS(req_to_token_pool=NS(req_to_token=slots[None].to(torch.int32)))
        linker.on_release(req(f"fill-{i}", toks, {"fill": f"m/{i}"}), tree)
        seg = [f"m/{i}", len(prompt), ITEM_TOKENS] + ([len(prompt)] if a.pos else [])
        segs.append(seg)
        prompt += toks
    prompt += [7, 8, 9]
    n = ITEMS * ITEM_TOKENS
    times = []
    for rep in range(a.reps):
        rid = f"r{rep}"
        t0 = time.perf_counter()
        linker.note(req(rid, prompt, {"segments": segs}), 0)
        pages = linker.lookup(rid, [PoolTransfer(name=PoolName.KV, keys=["h"] * (len(prompt) - 1))])
        assert pages == [n], pages
        ok = linker.load(rid, [PoolTransfer(name=PoolName.KV, device_indices=torch.arange(n, 2 * n),
                                            keys=["h"] * n)])
        idx = linker.start_layer_wise_loading()
        assert ok and idx >= 0 and linker.finish_layer_wise_loading(idx)
        times.append(time.perf_counter() - t0)
        linker.noted.pop(rid, None)
        linker.loaded.pop(rid, None)
    times.sort()
    print(json.dumps({"shape": a.shape, "layers": layers, "kv_heads": heads, "head_dim": dim,
                      "codec": a.codec, "pos": a.pos, "items": ITEMS, "pooled_tokens": n,
                      "reps": a.reps, "ms_median": round(1e3 * st.median(times), 3),
                      "ms_p90": round(1e3 * times[int(0.9 * (len(times) - 1))], 3)}))


if __name__ == "__main__":
    main()
