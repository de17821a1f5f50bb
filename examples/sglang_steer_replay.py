#!/usr/bin/env python3
"""Replays a Mooncake-format trace through recache into SGLang and prints SGLang's own prefix
hit rate (the sum of `/generate` `meta_info.cached_tokens` over prompt tokens) next to the
shadow cache's (recache's policy over the same stream, from recache's `/metrics`). The
measurement behind README "Steering SGLang": run it once per setup (native SGLang, recache
with `--sglang-priority`, SGLang with the recache plugin) against a flushed SGLang.

Prompts are built as in `recache bench replay` (32 tokens per hash id, seeded from the id,
plus one tail token), truncated to `--max-blocks` hash ids so a CPU engine replays quickly.
`--trace scan` replays a synthetic scan-polluted stream instead (`scan_stream`): hot prefixes
asked every round, and from the third round on, one-off prompts between the rounds that push
the hot prefixes out of an LRU cache of ~40 blocks (LRU 0.079, LFU 0.434 = OPT in `recache
sim` on the same stream at 34-41 blocks). Standard library only:

    python3 examples/sglang_steer_replay.py --trace scan --recache http://127.0.0.1:8080 \\
        --engine http://127.0.0.1:PORT
"""

import argparse
import json
import time
import urllib.request

MASK = (1 << 64) - 1


def splitmix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def tokens(ids, tail):
    """`recache bench replay`'s prompt: 32 tokens per hash id, then one tail token."""
    tok = lambda x: 3 + splitmix(x & MASK) % 4000  # noqa: E731
    out = [tok(h * 64 + j) for h in ids for j in range(32)]
    out.append(tok(tail ^ 0xDEADBEEF))
    return out


def scan_stream(hot=6, hot_blocks=4, scan=4, scan_blocks=8, rounds=12, warm=2):
    """Hash-id lists: each round the `hot` prefixes, then (after `warm` rounds) `scan` one-offs."""
    out, fresh = [], 100_000
    for r in range(rounds):
        out += [[h * hot_blocks + j for j in range(hot_blocks)] for h in range(hot)]
        if r >= warm:
            for _ in range(scan):
                out.append(list(range(fresh, fresh + scan_blocks)))
                fresh += scan_blocks
    return out


def requests(trace, n, max_blocks):
    if trace == "scan":
        return scan_stream()
    with open(trace) as f:
        return [json.loads(line)["hash_ids"][:max_blocks] for _, line in zip(range(n), f)]


def post(url, body, answer_json=True):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        raw = r.read()
    return json.loads(raw) if answer_json else raw


def metric(base, name):
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and line[len(name)] in "{ ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, help="Mooncake-format JSONL, or `scan`")
    ap.add_argument("--recache", required=True, help="recache's base URL")
    ap.add_argument("--engine", required=True, help="SGLang's base URL (flushed first)")
    ap.add_argument("--requests", type=int, default=250)
    ap.add_argument("--max-blocks", type=int, default=8)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    for _ in range(100):  # 400 while a request (or recache's /health probe) runs
        try:
            post(f"{a.engine}/flush_cache", {}, answer_json=False)  # "Cache flushed."
            break
        except urllib.error.HTTPError:
            time.sleep(0.1)
    else:
        raise SystemExit("SGLang did not flush its cache")
    shadow0 = (metric(a.recache, "recache_kv_shadow_hit_blocks_total"),
               metric(a.recache, "recache_kv_shadow_blocks_total"))
    prompt = cached = 0
    started = time.monotonic()
    stream = requests(a.trace, a.requests, a.max_blocks)
    for i, ids in enumerate(stream):
        ans = post(f"{a.recache}/generate", {
            "input_ids": tokens(ids, i),
            "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
        prompt += ans["meta_info"]["prompt_tokens"]
        cached += ans["meta_info"]["cached_tokens"]
    wall = time.monotonic() - started
    hits = metric(a.recache, "recache_kv_shadow_hit_blocks_total") - shadow0[0]
    blocks = metric(a.recache, "recache_kv_shadow_blocks_total") - shadow0[1]
    print(json.dumps({"label": a.label, "trace": a.trace, "requests": len(stream),
                      "prompt_tokens": prompt, "cached_tokens": cached,
                      "hit_rate": round(cached / max(prompt, 1), 6),
                      "shadow_hit_rate": round(hits / max(blocks, 1), 6),
                      "wall_s": round(wall, 1)}))


if __name__ == "__main__":
    main()
