#!/usr/bin/env python3
"""The item pool's prefill cost on a running SGLang testbed engine (`up --engine sglang
--item-pool`): the same ~3,300-token item-first prompt computed whole against with its 100
leading items (1,900 tokens) loaded from the pool, sequential, the order alternating per pair.
Times are SGLang's own (`meta_info`: prefill_finished_time - forward_entry_time).

Usage: sglang_pool_cost.py URL PAIRS. Prints one JSON line (medians and the per-pair ratio's
median, min, max). docs/engines.md, "The item pool on both engines", reads it.
"""
import json, random, statistics as st, sys, urllib.request
up, pairs = sys.argv[1], int(sys.argv[2])
def post(body):
    req = urllib.request.Request(up + "/generate", json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())
rng = random.Random(9)
items = [[256 + k % 200] + [rng.randrange(400, 4000) for _ in range(18)] for k in range(100)]
segs, head = [], []
for k, it in enumerate(items):
    key = f"m/pc-{k}"
    post({"input_ids": it, "sampling_params": {"max_new_tokens": 1, "temperature": 0,
          "custom_params": {"recache_pool": json.dumps({"fill": key})}}})
    segs.append([key, len(head), len(it)]); head += it
res = {"whole": [], "pooled": [], "loaded": []}
for i in range(pairs):
    toks = head + [rng.randrange(400, 4000) for _ in range(1400)]
    for kind in (["whole", "pooled"] if i % 2 == 0 else ["pooled", "whole"]):
        sp = {"max_new_tokens": 1, "temperature": 0}
        if kind == "pooled":
            sp["custom_params"] = {"recache_pool": json.dumps({"segments": segs})}
        m = post({"input_ids": toks, "sampling_params": sp, "cache_salt": f"{kind}-{i}"})["meta_info"]
        res[kind].append(m["prefill_finished_time"] - m["forward_entry_time"])
        if kind == "pooled":
            res["loaded"].append(m.get("cached_tokens_details", {}).get("host", 0))
r = [p / w for p, w in zip(res["pooled"], res["whole"])]
print(json.dumps({"prompt_tokens": len(head) + 1400, "pooled_tokens": len(head), "pairs": pairs,
    "whole_prefill_ms_median": 1e3 * st.median(res["whole"]), "pooled_prefill_ms_median": 1e3 * st.median(res["pooled"]),
    "pooled_over_whole_median": st.median(r), "min": min(r), "max": max(r), "loaded_median": st.median(res["loaded"])}))
