"""Beauty-style interaction data as `recache bench gr` / `bench quality` read it, the user
split, and the per-request pieces (profile, candidates) both sides build.

Mirrors `sidecar/src/bench/gr/workload.rs` (`load`: users with >= 2 items, items ranked by
interaction count then id, titles sorted by numeric key, item i takes title i mod #titles) and
`sidecar/src/bench/quality/split.rs` (the split; `tests/tests/engine_ranker_prompt.rs` checks both
sides agree on it). Plain stdlib.
"""
import bisect, json

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
SPLIT_SALT = 0x7175616C69747921  # split.rs SPLIT_SALT
HELD_OUT_PER_MILLE = 50  # test users: only `bench quality` ever ranks them
DEV_PER_MILLE = 20  # dev users: the training script's own progress check, never trained on


def mix64(x):
    """recache_hash::mix64 (SplitMix64's finalizer after adding the golden ratio)."""
    z = (x + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def bucket(user):
    """split.rs `bucket`: the user's place in 0..1000, fixed by its id alone."""
    return mix64((user ^ SPLIT_SALT) & MASK64) % 1000


def split_of(user):
    b = bucket(user)
    if b < HELD_OUT_PER_MILLE:
        return "test"
    if b < HELD_OUT_PER_MILLE + DEV_PER_MILLE:
        return "dev"
    return "train"


class Data:
    def __init__(self, data_path, items_path):
        self.users = []
        counts = {}
        with open(data_path) as f:
            for n, line in enumerate(f, 1):
                try:
                    nums = [int(x) for x in line.split()]
                except ValueError as e:
                    raise SystemExit(f"{data_path} line {n}: expected `user item item ...`: {e}")
                if len(nums) < 3:
                    continue
                for i in nums[1:]:
                    counts[i] = counts.get(i, 0) + 1
                self.users.append((nums[0], nums[1:]))
        if not self.users:
            raise SystemExit(f"{data_path}: no user with at least two items")
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        self.split = [split_of(uid) for uid, _ in self.users]
        self.items = [r[0] for r in ranked]
        self.item_counts = [r[1] for r in ranked]
        self.count = counts
        self.cum = []
        acc = 0
        for c in self.item_counts:
            acc += c
            self.cum.append(acc)
        with open(items_path) as f:
            raw = json.load(f)
        titled = []
        for k, v in raw.items():
            t = v.get("title") if isinstance(v, dict) else None
            if k.isdigit() and isinstance(t, str) and t.strip():
                titled.append((int(k), t))
        if not titled:
            raise SystemExit(f"{items_path}: no item with a numeric key and a non-empty title")
        titled.sort()
        self.titles = [t for _, t in titled]

    def title_of(self, item):
        return item % len(self.titles)

    def draw(self, rng):
        """An item drawn by interaction count (bench gr's candidate draw)."""
        return self.items[bisect.bisect_right(self.cum, rng.random() * self.cum[-1])]

    def candidates(self, rng, targets, n):
        """`targets` then popularity-drawn others, distinct, `n` in all."""
        out, seen = list(targets), set(targets)
        while len(out) < n:
            it = self.draw(rng)
            if it not in seen:
                seen.add(it)
                out.append(it)
        return out
