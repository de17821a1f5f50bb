#!/usr/bin/env python3
"""Where a retrieval's time goes: a least-squares fit of each round's time per retrieval
(1 / retrievals/s at saturation) against the tokens the engine computed and the engine
requests it served per retrieval, over the recache and vllm-direct rows of a
`recache bench peers --workloads retrieve --json` file (docs/retrieve.md, "Where the time goes").

    python3 examples/retrieve/fit_cost.py docs/data/peers-retrieve-avx2-2026-12-06.json

    time per retrieval ≈ a · computed tokens + r · engine requests

`a` is what a computed token costs (the prompt's prefill, each beam's new tokens), `r` what an
engine request costs beyond its tokens (its row of the LM head over the whole vocabulary, the
sampler's log-softmax, scheduling). Prints one JSON object: the fit, each row's measured and
fitted time, and per width the ratio the fit gives vllm-direct's time over recache's
(`fitted_ratio`) and what it would be with every engine request free (`ratio_if_requests_free`).
Plain stdlib.
"""
import json
import sys
from collections import defaultdict

SYSTEMS = ("recache", "vllm-direct")


def rows(path):
    out = []
    with open(path) as f:
        for line in f:
            d = json.loads(line)
            if d.get("summary") or d.get("system") not in SYSTEMS or not d.get("rps"):
                continue
            n = d["requests"]
            out.append({"system": d["system"], "width": d["beam_width"], "round": d["round"],
                        "s": 1.0 / d["rps"], "tokens": d["computed_tokens"] / n,
                        "requests": d["engine_requests_per_retrieval"]})
    return out


def fit(rs):
    # Normal equations of y = a·t + r·q (no intercept: an empty retrieval costs nothing).
    stt = sum(x["tokens"] ** 2 for x in rs)
    sqq = sum(x["requests"] ** 2 for x in rs)
    stq = sum(x["tokens"] * x["requests"] for x in rs)
    sty = sum(x["tokens"] * x["s"] for x in rs)
    sqy = sum(x["requests"] * x["s"] for x in rs)
    det = stt * sqq - stq * stq
    if abs(det) < 1e-12:
        sys.exit("fit_cost: the rows do not separate tokens from requests (one width only?)")
    return (sty * sqq - sqy * stq) / det, (sqy * stt - sty * stq) / det


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rs = rows(sys.argv[1])
    if not rs:
        sys.exit(f"fit_cost: no recache or vllm-direct retrieve rows in {sys.argv[1]}")
    a, r = fit(rs)
    by = defaultdict(list)
    for x in rs:
        x["fitted_s"] = a * x["tokens"] + r * x["requests"]
        by[(x["width"], x["system"])].append(x)

    def med(v):
        v = sorted(v)
        return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2

    widths = {}
    for w in sorted({x["width"] for x in rs}):
        rec, vd = by.get((w, "recache")), by.get((w, "vllm-direct"))
        if not rec or not vd:
            continue
        t_rec, q_rec = rec[0]["tokens"], rec[0]["requests"]
        t_vd, q_vd = vd[0]["tokens"], vd[0]["requests"]
        widths[w] = {
            "measured_ratio": med([v["s"] for v in vd]) / med([v["s"] for v in rec]),
            "fitted_ratio": (a * t_vd + r * q_vd) / (a * t_rec + r * q_rec),
            "ratio_if_requests_free": (a * t_vd + r * q_vd) / (a * t_rec),
            "recache": {"tokens": t_rec, "requests": q_rec,
                        "tokens_ms": 1e3 * a * t_rec, "requests_ms": 1e3 * r * q_rec},
            "vllm_direct": {"tokens": t_vd, "requests": q_vd,
                            "tokens_ms": 1e3 * a * t_vd, "requests_ms": 1e3 * r * q_vd},
        }
    err = [abs(x["fitted_s"] / x["s"] - 1) for x in rs]
    print(json.dumps({
        "source": sys.argv[1],
        "a_ms_per_token": 1e3 * a, "r_ms_per_request": 1e3 * r,
        "request_in_tokens": r / a,
        "max_abs_error": max(err), "median_abs_error": med(err),
        "per_width": widths,
        "rows": [{k: x[k] for k in ("system", "width", "round", "s", "fitted_s",
                                    "tokens", "requests")} for x in rs],
    }, indent=1))


if __name__ == "__main__":
    main()
