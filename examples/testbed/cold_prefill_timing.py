"""Times cold prefills on running vLLM testbed engines: the same prompts on each, one at a time.

Usage: cold_prefill_timing.py URL[,URL..] NAME[,NAME..] N [SEED]
Each of N prompts (~6,500 tokens of random words, a new prefix each, so no cache hit: it
checks `cached_tokens` is 0) goes to every engine, the order rotating per prompt; `max_tokens`
1. Prints one JSON line: the prompt's tokens and per engine the seconds, median, min, max.
examples/testbed/threads-timing.sh drives it (docs/gr-throughput.md: the thread check).
"""
import json, random, statistics, sys, time, urllib.request

WORDS = ("apple river stone cloud green music table window paper light horse candle bridge "
         "forest").split()


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        ans = json.loads(r.read())
    return time.perf_counter() - t, ans["usage"]


def main():
    urls, names, n = sys.argv[1].split(","), sys.argv[2].split(","), int(sys.argv[3])
    rng = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 7)
    res = {k: [] for k in names}
    usage = {}
    for i in range(n):
        text = f"request {i} {rng.random()} " + " ".join(rng.choice(WORDS) for _ in range(1800))
        body = {"model": "tiny-qwen2", "prompt": text, "max_tokens": 1, "temperature": 0}
        k = i % len(urls)
        pairs = list(zip(names, urls))
        for name, url in pairs[k:] + pairs[:k]:
            dt, usage = post(url, body)
            assert usage["prompt_tokens_details"]["cached_tokens"] == 0, usage
            res[name].append(round(dt, 3))
    print(json.dumps({"prompt_tokens": usage.get("prompt_tokens"), "runs": {
        k: {"s": v, "median": statistics.median(v), "min": min(v), "max": max(v)}
        for k, v in res.items()}}))


if __name__ == "__main__":
    main()
