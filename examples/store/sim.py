"""The pool with a store tier at scale (issue 46, item 5): memory per replica and ranking
throughput of BAT's hot/cold placement (Alg. 1: hot items replicated in every replica's host
pool, the cold tail sharded once across the cluster in a distributed store) against
replicate-all (every replica pools the same most popular items, the rest computed), for a
catalog and a cluster larger than this machine, from costs measured here:

- item popularity: a Zipf exponent fitted to the Amazon Beauty interactions (--data);
- fetching an item from the store and loading it from local memory: the medians of
  ``measure.py`` (--store-json; Mooncake read into a registered buffer, and the local copy);
- computing: with --fit, the engine's measured prefill cost (a `recache bench costfit` fit,
  `time = a*tokens + b*pairs + c`, docs/prefill-cost.md), so a computed token is charged for
  the query-key pairs it attends as well; without it, tokens at a flat prefill rate
  (--recompute-tokens-per-s, the throughput-inverse-to-tokens model).

    python3 examples/store/sim.py --json --fit docs/data/prefill-cost-1.5b-shape.jsonl \
        > docs/data/store-sim-fit-2026-12-02.json

Model, per ranking request (the item-first pooled layout): the engine computes the user's
profile and instruction (--fixed-tokens) and, per candidate (--candidates, drawn by
popularity), either loads it from the local pool, fetches it from the store, or computes it.
Time per request = the computed tokens' cost + the candidates' loads and fetches; throughput
is its inverse. With --fit, pairs are counted for the item-first layout: an item computed in
the request attends to the candidates before it (on average half of them) and to itself, the
profile and instruction to every candidate and to themselves. Fetches
are charged in full (not overlapped with the forward) and at loopback speed (no network).
Equal memory: a replica's pool plus its share of the store (the store's bytes / replicas)
equals replicate-all's pool. Hot items per replica are chosen by scanning, as Alg. 1 picks
the split that minimises the expected cost.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path


def fit_zipf(data: Path) -> tuple[float, int]:
    """Least-squares slope of log(count) against log(rank) over every item of ``data``."""
    counts = Counter()
    for line in data.read_text().splitlines():
        counts.update(line.split()[1:])
    v = sorted(counts.values(), reverse=True)
    pts = [(math.log(r + 1), math.log(c)) for r, c in enumerate(v)]
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)
    return -slope, len(v)


class Zipf:
    """Share of accesses that the ``x`` most popular of ``n`` items get, for exponent ``s``."""

    EXACT = 10_000

    def __init__(self, s: float, n: int):
        self.s, self.n = s, n
        self.head = [0.0]
        for k in range(1, self.EXACT + 1):
            self.head.append(self.head[-1] + k ** -s)
        self.total = self._h(n)

    def _h(self, x: float) -> float:
        if x <= self.EXACT:
            return self.head[int(x)]
        a, b, s = self.EXACT + 0.5, x + 0.5, self.s
        tail = math.log(b / a) if abs(s - 1) < 1e-9 else (b ** (1 - s) - a ** (1 - s)) / (1 - s)
        return self.head[self.EXACT] + tail

    def share(self, x: float) -> float:
        return self._h(min(max(x, 0), self.n)) / self.total


def store_costs(path: Path, item_bytes: int) -> tuple[float, float, str]:
    """(store fetch µs, local load µs) per item from measure.py's summary rows, scaled by size
    from the nearest measured item size."""
    rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    rows = [r for r in rows if r.get("summary")]

    def per_item(store: str) -> tuple[float, int]:
        cand = [r for r in rows if r["store"] == store]
        if not cand:
            raise SystemExit(f"{path}: no summary row for {store}")
        r = min(cand, key=lambda r: abs(r["item_bytes"] - item_bytes))
        return r["per_item_fetch_us"] * item_bytes / r["item_bytes"], r["item_bytes"]

    fetch, at = per_item("mooncake-into")
    local, _ = per_item("local")
    return fetch, local, (f"{path}: mooncake-into (store) and local rows at {at} B, "
                          f"scaled linearly to {item_bytes} B")


def read_fit(path: Path) -> tuple[float, float, float, str]:
    """(a s/token, b s/pair, c s/request) of the fit over all kinds in a costfit file."""
    for line in path.read_text().splitlines():
        row = json.loads(line) if line.strip().startswith("{") else {}
        if row.get("fit") == "all" and "a_s_per_token" in row:
            return row["a_s_per_token"], row["b_s_per_pair"], row["c_s"], row.get("model", "?")
    raise SystemExit(f"{path}: no fit row over all kinds (\"fit\": \"all\")")


def plan(z: Zipf, args, mem: float, fetch_us: float, local_us: float, fit=None) -> dict:
    tokens = args.item_bytes / args.kv_bytes_per_token
    fits = mem / args.item_bytes  # items a replica's memory holds
    n, f = args.candidates, args.fixed_tokens

    def compute_us(computed_items: float) -> float:
        """The engine's time for the request's computed tokens, µs."""
        t = f + computed_items * tokens
        if fit is None:
            return t / args.recompute_tokens_per_s * 1e6
        a, b, c, _ = fit
        per_item = tokens * (n - 1) / 2 * tokens + tokens * (tokens + 1) / 2
        pairs = computed_items * per_item + f * n * tokens + f * (f + 1) / 2
        return (a * t + b * pairs + c) * 1e6

    def request_us(hot: float, stored: float) -> tuple[float, float, float]:
        local = z.share(hot)
        covered = z.share(hot + stored)
        moved = n * (local * local_us + (covered - local) * fetch_us)
        return compute_us(n * (1 - covered)) + moved, local, covered

    base_us, base_local, _ = request_us(fits, 0)
    best = None
    for i in range(0, 201):  # hot items: 0 .. fits, on a log-spaced grid (and both ends)
        hot = 0.0 if i == 0 else fits * 10 ** (-(200 - i) / 25)
        stored = args.replicas * (fits - hot)  # each replica gives the rest of its memory
        us, local, covered = request_us(hot, min(stored, z.n - hot))
        if best is None or us < best[0]:
            best = (us, hot, stored, local, covered)
    us, hot, stored, local, covered = best
    gib = 1 << 30
    return {
        "memory_per_replica_gib": mem / gib,
        "replicate_all": {"pool_items_per_replica": round(fits), "local_share": base_local,
                          "request_ms": base_us / 1e3},
        "hot_cold": {"hot_items_per_replica": round(hot),
                     "store_items": round(min(stored, z.n - hot)),
                     "pool_gib_per_replica": hot * args.item_bytes / gib,
                     "store_gib_per_replica": (mem - hot * args.item_bytes) / gib,
                     "local_share": local, "store_share": covered - local,
                     "computed_share": 1 - covered, "request_ms": us / 1e3},
        "rps_vs_replicate_all": base_us / us,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=Path("../shared/data/amazon/Beauty.txt"))
    ap.add_argument("--store-json", type=Path,
                    default=Path("docs/data/store-choice-2026-11-29.json"))
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--items", type=int, default=100_000_000)
    ap.add_argument("--item-bytes", type=int, default=293_888,
                    help="K/V bytes per item (default 287 KiB: BAT's Industry set)")
    ap.add_argument("--kv-bytes-per-token", type=int, default=2048)
    ap.add_argument("--recompute-tokens-per-s", type=float, default=876.0)
    ap.add_argument("--fixed-tokens", type=int, default=1024,
                    help="tokens computed per request besides the items (profile, instruction)")
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--memory-gib", default="16,64,256",
                    help="host memory per replica for the pool (and its store share)")
    ap.add_argument("--fit", type=Path,
                    help="a `recache bench costfit` JSON-lines file: charge computed tokens by "
                    "its fit over all kinds (tokens and pairs) instead of a flat rate")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    s, fitted_on = fit_zipf(args.data)
    z = Zipf(s, args.items)
    fetch_us, local_us, source = store_costs(args.store_json, args.item_bytes)
    fit = read_fit(args.fit) if args.fit else None
    head = {"zipf_s": s, "zipf_fitted_on_items": fitted_on, "items": args.items,
            "replicas": args.replicas, "item_bytes": args.item_bytes,
            "store_fetch_us_per_item": fetch_us, "local_load_us_per_item": local_us,
            "costs_from": source,
            "compute_model": ({"fit": str(args.fit), "model": fit[3], "a_s_per_token": fit[0],
                               "b_s_per_pair": fit[1], "c_s": fit[2]} if fit else
                              {"tokens_per_s": args.recompute_tokens_per_s}),
            "fixed_tokens": args.fixed_tokens, "candidates": args.candidates}
    print(json.dumps(head) if args.json else head)
    for g in (float(x) for x in args.memory_gib.split(",")):
        row = plan(z, args, g * (1 << 30), fetch_us, local_us, fit)
        print(json.dumps(row) if args.json else row)


if __name__ == "__main__":
    main()
