#!/usr/bin/env python3
"""How well `recache bench costfit`'s fit predicts what `recache bench gr` measured, per mode,
and what it projects for a GPU serving Qwen2-1.5B (stdlib only, no engine).

    python3 examples/costfit/predict.py --fit docs/data/prefill-cost-1.5b-shape.jsonl \
        --gr docs/data/gr-shape-1gib-sat40.json > docs/data/gr-shape-fit-check.json

For every measured round of every mode (bench gr rows with `mode`, round in `repeat`), the fit over
all kinds (`"fit": "all"`: time = a*tokens + b*pairs + c) predicts the engine time of the
round's requests run one at a time, `a*computed_tokens + b*attended_pairs + c*requests`, and
sets it against two measured times:

- `wall_s`: requests / rps, the round's time at saturation (the engine never idles), which is
  what the prediction is for (one engine, one OpenMP thread: a batch does the same work a
  request at a time would, plus what batching saves or costs);
- `engine_prefill_s`: vLLM's summed per-request prefill time, which counts a request's wait
  for the others it is batched with, so it overstates the work at concurrency > 1.

`within_15pct` compares prediction and `wall_s` (|predicted / measured - 1| <= 0.15), per round
and for the median over rounds. The projection: the same modes' tokens and pairs on a
compute-bound GPU running Qwen2-1.5B, where a request's time is proportional to its FLOPs
(linear FLOPs per token and attention FLOPs per pair from the published config, as
examples/testbed/flops.py counts them) plus the fit's per-request cost left out; the ratio of
two modes' throughputs is then the inverse ratio of their FLOPs per request. It is labelled a
projection: no GPU measured it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

# Qwen2-1.5B per layer, from its config (examples/testbed/flops.py): 2 x weights per token,
# 4 x heads x head_dim per query-key pair; 28 layers. The LM head is counted once a request
# (a prefill samples one position).
QWEN2_15B = {"layers": 28, "linear_per_token_layer": 93_585_408, "attn_per_pair_layer": 6_144,
             "lm_head_per_request": 466_747_392}


def rows_of(path: str) -> list[dict]:
    text = open(path, encoding="utf-8").read().strip()
    if text.startswith("["):
        return json.loads(text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", required=True, help="bench costfit JSON lines (its fit rows)")
    ap.add_argument("--gr", required=True, help="bench gr JSON (rows per mode and round)")
    ap.add_argument("--fit-name", default="all", help="which fit row predicts (default all)")
    args = ap.parse_args()
    fits = [r for r in rows_of(args.fit) if r.get("fit") == args.fit_name]
    if not fits or "a_s_per_token" not in fits[0]:
        print(f"{args.fit}: no usable fit row named {args.fit_name!r}", file=sys.stderr)
        return 2
    f = fits[0]
    a, b, c = f["a_s_per_token"], f["b_s_per_pair"], f["c_s"]
    # bench gr numbers its rounds in `repeat` (0, 1, ...); summary rows carry `summary`.
    runs = [r for r in rows_of(args.gr) if r.get("mode") and not r.get("summary")]
    if not runs:
        print(f"{args.gr}: no per-round bench gr rows", file=sys.stderr)
        return 2
    old = [r["mode"] for r in runs if "attended_pairs" not in r]
    if old:
        print(f"{args.gr}: rows without attended_pairs (written before bench gr counted them): "
              f"{sorted(set(old))}; run bench gr again", file=sys.stderr)
        return 2
    per_mode: dict[str, list[dict]] = {}
    for r in runs:
        n = r["requests"] - r.get("errors", 0)
        pred = a * r["computed_tokens"] + b * r["attended_pairs"] + c * n
        wall = n / r["rps"] if r.get("rps") else None
        per_mode.setdefault(r["mode"], []).append({
            "round": r.get("repeat"), "requests": n, "computed_tokens": r["computed_tokens"],
            "attended_pairs": r["attended_pairs"], "predicted_s": pred, "wall_s": wall,
            "engine_prefill_s": r.get("engine_prefill_s"),
            "predicted_over_wall": pred / wall if wall else None,
            "predicted_over_engine_prefill": (pred / r["engine_prefill_s"]
                                              if r.get("engine_prefill_s") else None),
            "terms_s": {"a_tokens": a * r["computed_tokens"], "b_pairs": b * r["attended_pairs"],
                        "c_requests": c * n},
        })
    q = QWEN2_15B
    lin = q["layers"] * q["linear_per_token_layer"]
    att = q["layers"] * q["attn_per_pair_layer"]
    modes = []
    for mode, rs in per_mode.items():
        ratios = [x["predicted_over_wall"] for x in rs if x["predicted_over_wall"]]
        med = statistics.median(ratios) if ratios else None
        tok = statistics.median(x["computed_tokens"] / x["requests"] for x in rs)
        pairs = statistics.median(x["attended_pairs"] / x["requests"] for x in rs)
        flops = lin * tok + att * pairs + q["lm_head_per_request"]
        modes.append({
            "mode": mode, "rounds": rs, "predicted_over_wall_median": med,
            "predicted_over_wall_min": min(ratios) if ratios else None,
            "predicted_over_wall_max": max(ratios) if ratios else None,
            "within_15pct": med is not None and abs(med - 1) <= 0.15,
            "tokens_per_request": tok, "pairs_per_request": pairs,
            "qwen2_1_5b_flops_per_request": flops,
        })
    up = next((m for m in modes if m["mode"] == "up"), None)
    for m in modes:
        m["projected_rps_vs_up_qwen2_1_5b_gpu"] = (
            up["qwen2_1_5b_flops_per_request"] / m["qwen2_1_5b_flops_per_request"] if up else None)
    out = {"fit": {k: f.get(k) for k in ("model", "fit", "a_s_per_token", "b_s_per_pair", "c_s",
                                        "b_over_a", "flop_ratio", "r2")},
           "fit_file": args.fit, "gr_file": args.gr, "modes": modes,
           "projection": {"what": "a projection, not a measurement: a compute-bound GPU serving "
                          "Qwen2-1.5B (28 layers), request time proportional to FLOPs",
                          "inputs": {"tokens_and_pairs": "medians per request of the bench gr "
                                     "rows above", **q}}}
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
