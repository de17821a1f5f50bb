#!/usr/bin/env python3
"""What the item pool claims when a plan cannot be served, on a live engine (the SGLang
linker by default; `--engine vllm` for the connector): nothing wrong is ever loaded and the
engine keeps serving.

Run with the testbed venv's Python: item_pool_faults.py --upstream URL [--engine vllm].
Prints one JSON line and exits non-zero when a check fails. Cases, each on its own salt:
- `mismatch`: a resident key sent for other tokens: nothing loaded, the scores equal the same
  prompt computed plainly;
- `partial`: the third of four items was never filled: the run stops before it (exactly the
  first two items' tokens loaded);
- `evict`: a plan that evicts its own first item: nothing loaded, the key no longer present;
- `malformed`: a plan that is not JSON, and segments of the wrong shape: answered, nothing
  loaded;
- the engine still answers `/health` afterwards.
"""

import argparse, json, random, sys, urllib.request

from item_pool_check import fill, post, report, score


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--model", default="tiny-qwen2")
    ap.add_argument("--engine", choices=["vllm", "sglang"], default="sglang")
    ap.add_argument("--seed", type=int, default=11)
    a = ap.parse_args()
    up, eng = a.upstream.rstrip("/"), a.engine
    rng = random.Random(a.seed)
    tag = f"faults{rng.randrange(1 << 30)}"
    word = lambda n: [rng.randrange(400, 4000) for _ in range(n)]  # noqa: E731
    labels = [256 + k for k in range(4)]
    items = [[labels[k]] + word(15) for k in range(4)]
    keys = [f"{a.model}/{tag}-{k}" for k in range(4)]
    for k in (0, 1, 3):  # item 2 is never filled
        fill(up, a.model, items[k], keys[k], eng)
    tokens, segments = [], []
    for key, seg in zip(keys, items):
        segments.append([key, len(tokens), len(seg)])
        tokens += seg
    tokens += word(40)
    sc = lambda toks, salt, plan=None: score(  # noqa: E731
        up, a.model, toks, labels, f"{tag}-{salt}",
        None if plan is None else {"recache_pool": plan}, engine=eng)
    out, checks = {"engine": eng}, {}

    other = [labels[0]] + word(15)  # key 0's place, other tokens
    mism = other + tokens[len(items[0]):]
    got, ans = sc(mism, "m", {"segments": [[keys[0], 0, len(other)]]})
    plain, _ = sc(mism, "m-plain")
    out["mismatch_loaded"] = report(ans, eng).get("loaded_tokens")
    out["mismatch_vs_plain"] = max(abs(p - q) for p, q in zip(got, plain))
    checks["mismatch: nothing loaded"] = out["mismatch_loaded"] == 0
    checks["mismatch: scores are the plain prompt's"] = out["mismatch_vs_plain"] <= 1e-3

    _, ans = sc(tokens, "p", {"segments": segments})
    out["partial_loaded"] = report(ans, eng).get("loaded_tokens")
    checks["partial: the run stops at the missing item"] = \
        out["partial_loaded"] == len(items[0]) + len(items[1])

    _, ans = sc(tokens, "e", {"segments": segments, "evict": [keys[0]]})
    info = report(ans, eng)
    out["evict_loaded"], out["evict_present"] = info.get("loaded_tokens"), info.get("present")
    checks["evict: nothing loaded"] = out["evict_loaded"] == 0
    checks["evict: the key is gone"] = keys[0] not in (out["evict_present"] or [])

    if eng == "sglang":
        body = {"input_ids": tokens, "sampling_params": {
            "max_new_tokens": 1, "temperature": 0, "custom_params": {"recache_pool": "{not json"}},
            "cache_salt": f"{tag}-x"}
        bad = post(up + "/generate", body)
        checks["malformed: a plan that is not JSON is answered"] = bool(bad.get("output_ids")
                                                                        or bad.get("text"))
    _, ans = sc(tokens, "y", {"segments": [["x"], [keys[1], "a", None]]})
    out["malformed_loaded"] = report(ans, eng).get("loaded_tokens", 0)
    checks["malformed: segments of the wrong shape load nothing"] = out["malformed_loaded"] == 0

    with urllib.request.urlopen(up + "/health", timeout=30) as r:
        out["health"] = r.status
    checks["the engine is healthy afterwards"] = out["health"] == 200
    out["failed"] = [k for k, ok in checks.items() if not ok]
    print(json.dumps(out))
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
