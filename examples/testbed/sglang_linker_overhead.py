#!/usr/bin/env python3
"""What SGLang's external-linker item pool costs requests that carry no plan: two running SGLang
testbed engines, one with `--item-pool` (ON) and one without (OFF), the same random prompts to
each in turn (order alternating), sequential, `max_new_tokens` 1.

Usage: sglang_linker_overhead.py ON_URL OFF_URL REQUESTS PROMPT_TOKENS. Prints one JSON line:
client-side seconds and SGLang's own prefill time per engine, and the per-request ON/OFF
ratio's median, min, max.
"""
import json, random, statistics as st, sys, time, urllib.request
on, off, n, L = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=120) as r:
        out = json.loads(r.read())
    return time.perf_counter() - t, out
rng = random.Random(5)
res = {"on": [], "off": [], "on_pf": [], "off_pf": []}
for i in range(n):
    toks = [rng.randrange(400, 4000) for _ in range(L)]
    order = [("on", on), ("off", off)] if i % 2 == 0 else [("off", off), ("on", on)]
    for name, up in order:
        dt, out = post(up + "/generate", {"input_ids": toks, "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
        m = out["meta_info"]
        res[name].append(dt)
        res[name + "_pf"].append(m["prefill_finished_time"] - m["forward_entry_time"])
summ = {k: {"median_ms": 1e3 * st.median(v), "p90_ms": 1e3 * sorted(v)[int(0.9 * len(v))]} for k, v in res.items()}
ratios = [a / b for a, b in zip(res["on"], res["off"])]
print(json.dumps({"requests": n, "prompt_tokens": L, **summ, "paired_ratio_on_off_median": st.median(ratios),
                  "paired_ratio_min": min(ratios), "paired_ratio_max": max(ratios)}))
