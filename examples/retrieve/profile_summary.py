#!/usr/bin/env python3
"""Shares of py-spy samples (`py-spy record -f raw`) by where they fall, for the in-engine
retrieval profile of docs/retrieve.md: each sample goes to the first bucket whose key appears
in its stack, searched from the leaf up (API server) or from the root down (worker); the rest
is "other". Prints one JSON object.

    python3 examples/retrieve/profile_summary.py DIR   # DIR holds api.raw, worker.raw, core.raw
"""
import collections, json, sys
from pathlib import Path

API = [("recache plugin: beam loop", "beam_trie.py"),
       ("recache plugin: per-request setup and generate calls", "retrieve_plugin.py"),
       ("vLLM input processing", "input_processor"), ("vLLM output processing", "output_processor"),
       ("vLLM logprobs", "logprobs"), ("IPC (zmq)", "zmq")]
WORKER = [("model forward", "forward"), ("sampler (log-probabilities)", "sampl"),
          ("input preparation", "prepare_inputs"), ("waiting for work", "dequeue")]
CORE = [("sampler", "sample"), ("IPC (zmq)", "zmq"), ("kv cache manager", "kv_cache"),
        ("scheduler", "scheduler")]


def shares(path, buckets, leaf_first):
    rows = []
    for line in Path(path).read_text().splitlines():
        if line.strip():
            stack, n = line.rsplit(" ", 1)
            rows.append((stack.split(";"), int(n)))
    total = sum(n for _, n in rows)
    agg = collections.Counter()
    for frames, n in rows:
        order = reversed(frames) if leaf_first else frames
        agg[next((name for f in order for name, key in buckets if key in f), "other")] += n
    leaves = collections.Counter()
    for frames, n in rows:
        leaves[frames[-1]] += n
    return {"samples": total,
            "shares": {k: round(v / total, 3) for k, v in agg.most_common()},
            "top_leaves": {k: round(v / total, 3) for k, v in leaves.most_common(5)}}


d = Path(sys.argv[1])
print(json.dumps({"api_server": shares(d / "api.raw", API, True),
                  "worker": shares(d / "worker.raw", WORKER, False),
                  "engine_core": shares(d / "core.raw", CORE, True)}, indent=1))
