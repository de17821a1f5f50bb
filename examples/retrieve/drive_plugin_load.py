#!/usr/bin/env python3
"""A closed loop of `/v1/retrieve` calls against a running recache, for profiling the engine
while it serves retrievals (docs/retrieve.md, "Where the time goes at width 32").

    python3 examples/retrieve/drive_plugin_load.py --url http://127.0.0.1:18080/v1/retrieve \
        --items ../shared/data/items/Industrial_and_Scientific.item.json --width 32 --seconds 12

16 users, each the titles of 20 catalog items ("The user bought, in order: ..."), `top_k` 10,
--concurrency (4) in flight for --seconds; prints one JSON line: retrievals, wall_s, rps,
p50_ms and the last answer's usage. Plain stdlib.
"""
import argparse, json, time, urllib.request
import concurrent.futures as cf


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--items", required=True)
    ap.add_argument("--model", default="tiny-qwen2")
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args()
    with open(a.items) as f:
        titles = [v.get("title", "") for v in json.load(f).values() if isinstance(v, dict)]
    users = ["The user bought, in order: " + "; ".join(
        titles[(u * 37 + i * 101) % len(titles)] for i in range(20)) for u in range(16)]

    def one(i):
        body = json.dumps({"model": a.model, "user": {"id": f"u{i}", "text": users[i % 16]},
                           "beam_width": a.width, "top_k": min(10, a.width)}).encode()
        t = time.time()
        req = urllib.request.Request(a.url, body, {"content-type": "application/json"})
        with urllib.request.urlopen(req) as r:
            v = json.loads(r.read())
        return time.time() - t, v["usage"]

    t0, n, lat, usage = time.time(), 0, [], None
    with cf.ThreadPoolExecutor(a.concurrency) as ex:
        futs, i = {ex.submit(one, i) for i in range(a.concurrency)}, a.concurrency
        while futs:
            done, futs = cf.wait(futs, return_when=cf.FIRST_COMPLETED)
            for f in done:
                l, usage = f.result()
                lat.append(l)
                n += 1
                if time.time() - t0 < a.seconds:
                    futs.add(ex.submit(one, i))
                    i += 1
    wall = time.time() - t0
    print(json.dumps({"retrievals": n, "wall_s": wall, "rps": n / wall,
                      "p50_ms": sorted(lat)[len(lat) // 2] * 1000, "usage_last": usage}))


if __name__ == "__main__":
    main()
