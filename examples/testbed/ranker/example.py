#!/usr/bin/env python3
"""One `/v1/rank` request for the trained ranker, the way `recache bench quality` builds them:
a held-out user's last 20 items (before its last one) as title tokens, its last item among
99 others drawn by popularity, shuffled; item texts are titles fitted to 18 tokens (token ids
from the engine's own /tokenize). Prints the request body on stdout and, on stderr, which item
the user really interacted with next. Stdlib only (the quickstart runs it with python3).

    python3 examples/testbed/ranker/example.py --upstream URL --model M --data-dir DIR
"""
import argparse, json, os, random, sys, urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ranker import data as rdata, layout  # noqa: E402


def tokenize(upstream, model, text):
    body = json.dumps({"model": model, "prompt": text, "add_special_tokens": False}).encode()
    req = urllib.request.Request(upstream + "/tokenize", body,
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    d = rdata.Data(os.path.join(a.data_dir, "amazon/Beauty.txt"),
                   os.path.join(a.data_dir, "items/Industrial_and_Scientific.item.json"))
    rng = random.Random(a.seed)
    held = [h for (u, h), s in zip(d.users, d.split) if s == "test" and len(h) >= 6]
    hist = rng.choice(held)
    target = hist[-1]
    ids = d.candidates(rng, [target], 100)
    rng.shuffle(ids)
    cache = {}

    def text(i):
        t = d.title_of(i)
        if t not in cache:
            cache[t] = layout.fit(tokenize(a.upstream, a.model, d.titles[t]), 18)
        return cache[t]

    body = {"model": a.model, "top_k": 5,
            "user": {"id": "beauty-user", "tokens": layout.profile([text(i) for i in
                                                                    hist[:-1][-20:]])},
            "items": [{"id": i, "tokens": text(i)} for i in ids]}
    print(json.dumps(body))
    print(f"(held-out user: {len(hist) - 1} past items; the item it chose next: {target}, "
          f"\"{d.titles[d.title_of(target)][:60]}\")", file=sys.stderr)


if __name__ == "__main__":
    main()
