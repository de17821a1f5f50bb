"""The eviction table of docs/eviction.md: hit ratio of each policy on generated traces in
recache's simulator, at several capacities, over several trace seeds (Online-QA) or
request offsets (the MovieLens-100k replay, whose trace is the file's), with each learned
policy's share of the LRU -> OPT gap.

    cargo build --release -p recache-eviction --example sim -p recache-bench --example gen_trace
    python3 examples/eviction/table.py --json docs/data/eviction-table.json

Traces are generated into --workdir (not the repo; ml-100k's file comes from
examples/data/install-ml100k). Every simulator command line is in the JSON (`runs[].cmd`)
with its raw rows; `summary` holds, per (trace, capacity, policy), the median hit ratio and
the median gap share over the seeds. A markdown table goes to stdout. Extra simulator flags
(`--sim-args "--train-rows node"`) and policies (`--policies`) measure one change at a time;
hit ratios are deterministic for a build, so runs on a busy machine compare.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

TRACES = {
    # name -> gen_trace arguments (the seed and output are added)
    "online-qa": ["online-qa"],
    "online-qa-closed16": ["online-qa", "--closed-loop", "16"],
    "ml100k": ["ml100k"],
}
# Traces whose content does not depend on --seed: vary the replay's start instead.
OFFSET_TRACES = {"ml100k": 100}


def run(cmd: list[str]) -> str:
    print("+ " + shlex.join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sim", default="target/release/examples/sim")
    ap.add_argument("--gen", default="target/release/examples/gen_trace")
    ap.add_argument("--workdir", default="/tmp/recache-eviction-table")
    ap.add_argument("--traces", default="online-qa,ml100k")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--policies", default="lru,lfu,fpb,dead-first,laru,opt")
    ap.add_argument("--capacity", default="0.02,0.05,0.1")
    ap.add_argument("--sim-args", default="", help="extra simulator flags, one string")
    ap.add_argument("--json", help="write runs and summary here")
    a = ap.parse_args()
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    runs = []
    for trace in a.traces.split(","):
        for i in range(a.seeds):
            seed = 1 if trace in OFFSET_TRACES else i + 1
            path = work / f"{trace}-{seed}.jsonl"
            if not path.exists():
                run([a.gen, *TRACES[trace], "--seed", str(seed), "--out", str(path)])
            skip = i * OFFSET_TRACES.get(trace, 0)
            cmd = [a.sim, "--trace", str(path), "--policies", a.policies,
                   "--capacity", a.capacity, "--skip", str(skip), "--json",
                   *shlex.split(a.sim_args)]
            rows = json.loads(run(cmd))
            runs.append({"trace": trace, "seed": seed, "skip": skip,
                         "cmd": shlex.join(cmd), "rows": rows})
    summary = summarize(runs)
    print_table(summary)
    if a.json:
        Path(a.json).write_text(json.dumps({"runs": runs, "summary": summary}, indent=1) + "\n")


def summarize(runs: list[dict]) -> list[dict]:
    cells: dict[tuple, list] = {}
    for r in runs:
        by = {(x["policy"], x["capacity"]): x["hit_ratio"] for x in r["rows"]}
        for (policy, cap), hr in by.items():
            lru, opt = by.get(("lru", cap)), by.get(("opt", cap))
            share = None
            if lru is not None and opt is not None and opt > lru:
                share = (hr - lru) / (opt - lru)
            cells.setdefault((r["trace"], cap, policy), []).append((hr, share))
    out = []
    for (trace, cap, policy), xs in cells.items():
        shares = [s for _, s in xs if s is not None]
        out.append({
            "trace": trace, "capacity": cap, "policy": policy, "n": len(xs),
            "hit_ratio_median": statistics.median(h for h, _ in xs),
            "hit_ratio_min": min(h for h, _ in xs), "hit_ratio_max": max(h for h, _ in xs),
            "gap_share_median": statistics.median(shares) if shares else None,
        })
    return out


def print_table(summary: list[dict]) -> None:
    print("| trace | cap | policy | hit ratio, median (min-max) | share of LRU->OPT gap |")
    print("|---|---|---|---|---|")
    for s in sorted(summary, key=lambda s: (s["trace"], s["capacity"])):
        g = s["gap_share_median"]
        gap = "-" if g is None else f"{100 * g:.1f}%"
        print(f"| {s['trace']} | {100 * s['capacity']:g}% | {s['policy']} | "
              f"{s['hit_ratio_median']:.4f} ({s['hit_ratio_min']:.4f}-{s['hit_ratio_max']:.4f})"
              f" | {gap} |")


if __name__ == "__main__":
    main()
