"""Paired Recall@10 differences between rows of `recache bench quality --json` output that come
from different runs (other engines, other rankers, other readouts), which the bench's own `vs`
fields cannot pair: each row carries every user's rank (`ranks`), in the same user order for
the same --seed, so the difference is paired over users, with a 95% bootstrap interval.

    python3 examples/testbed/ranker/paired.py ROWS.jsonl \
      'ranker=gr-ranker-9b596025,layout=up-pool,readout=item' 'ranker=gr-ranker,layout=up,readout=label'

Each selector names row fields (`key=value`, comma-separated; values compare as text) and
must match exactly one row. Prints one JSON summary row: A's and B's Recall@10 and A minus B
(`mean`, `lo`, `hi`), over 1,000 resamples (seed 1). Plain stdlib.
"""
import json
import random
import sys


def pick(rows, selector):
    want = dict(kv.split("=", 1) for kv in selector.split(","))
    hits = [r for r in rows if all(str(r.get(k)) == v for k, v in want.items())]
    if len(hits) != 1:
        sys.exit(f"{selector}: {len(hits)} rows match (want one)")
    return hits[0]


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    a, b = pick(rows, sys.argv[2]), pick(rows, sys.argv[3])
    ha = [r is not None and r <= 10 for r in a["ranks"]]  # ranks count from 1
    hb = [r is not None and r <= 10 for r in b["ranks"]]
    if len(ha) != len(hb):
        sys.exit(f"the rows rank {len(ha)} and {len(hb)} users: not the same users")
    d = [x - y for x, y in zip(ha, hb)]
    rng = random.Random(1)
    means = sorted(sum(d[rng.randrange(len(d))] for _ in d) / len(d) for _ in range(1000))
    print(json.dumps({"summary": True, "a": sys.argv[2], "b": sys.argv[3],
                      "recall_at_10_a": sum(ha) / len(ha), "recall_at_10_b": sum(hb) / len(hb),
                      "delta_recall_at_10": {"mean": sum(d) / len(d), "lo": means[25],
                                             "hi": means[974]},
                      "users": len(d), "resamples": 1000}))


if __name__ == "__main__":
    main()
