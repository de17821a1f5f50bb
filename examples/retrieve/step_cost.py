#!/usr/bin/env python3
"""What one retrieval step costs vLLM, by how many label tokens it asks for.

A `/v1/retrieve` step on vLLM is one `/v1/completions` call with one prompt per live beam
(a shared, cached prompt plus the beam's code tokens) and the union of the beams' allowed
tokens as `logprob_token_ids` (docs/retrieve.md). This times such calls against a running
engine for several union sizes, and, for comparison, the call vLLM's own beam search makes per
step (the same prompts with `logprobs` = 2 x width, which it makes in-process).

    python3 examples/retrieve/step_cost.py --upstream $UPSTREAM --model $MODEL > out.json

Prints JSON: per case the median, min and max milliseconds of --reps calls (client clock, one
call at a time, nothing else running), after one call that caches the shared prompt.
"""
import argparse
import json
import random
import statistics
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.loads(r.read())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--width", type=int, default=32, help="prompts per call (live beams)")
    ap.add_argument("--labels", default="128,64,25,1", help="union sizes to time")
    ap.add_argument("--prompt-tokens", type=int, default=480)
    ap.add_argument("--token-base", type=int, default=32768, help="the index's code tokens")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--rounds", type=int, default=2, help="the cases interleaved this often")
    a = ap.parse_args()
    url = a.upstream.rstrip("/") + "/v1/completions"
    rng = random.Random(0)
    prompt = [rng.randrange(300, 5000) for _ in range(a.prompt_tokens)]
    base = a.token_base

    def scoring(prompts, labels):
        return {"model": a.model, "prompt": prompts, "max_tokens": 1, "temperature": 0,
                "logprobs": 1, "logprob_token_ids": labels, "return_tokens_as_token_ids": True}

    post(url, scoring(prompt, [base]))
    cases = {f"union_{k}": (lambda i, k=k: scoring(
        [prompt + [base + j, base + 128 + i] for j in range(a.width)],
        list(range(base + 256, base + 256 + k)))) for k in map(int, a.labels.split(","))}
    cases[f"top_logprobs_{2 * a.width}"] = lambda i: {
        "model": a.model, "prompt": [prompt + [base + j, base + 128 + i] for j in range(a.width)],
        "max_tokens": 1, "temperature": 0, "logprobs": 2 * a.width}
    samples = {name: [] for name in cases}
    for _ in range(a.rounds):
        for name, body in cases.items():
            for i in range(a.reps):
                t = time.perf_counter()
                post(url, body(i))
                samples[name].append((time.perf_counter() - t) * 1e3)
    out = {"upstream": a.upstream, "model": a.model, "width": a.width,
           "prompt_tokens": a.prompt_tokens, "reps": a.reps, "rounds": a.rounds, "cases": {
               n: {"median_ms": statistics.median(s), "min_ms": min(s), "max_ms": max(s),
                   "samples_ms": [round(x, 2) for x in s]} for n, s in samples.items()}}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
