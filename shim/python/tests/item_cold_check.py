#!/usr/bin/env python3
"""The item pool's cold tier on two live vLLM replicas sharing a Mooncake Store (testbed
`up --item-pool --pool-store ...`; the caller starts the store and the engines).

Run with the testbed venv's Python: item_cold_check.py --a URL --b URL --phase PHASE.
Prints one JSON line with what it measured and exits non-zero when a check fails.

Items are filled through replica A only (each fill is written through to the store); B never
computes them. For one item-first prompt `[L0 I0][L1 I1]..[U][instr]` it scores the labels
- on A, every item loaded from A's own pool (`local`);
- on B, every item marked cold, so B's connector reads it from the store (`cold`);
- on B as a plain causal prompt, no pool (`causal`).
Phases:
- `served` (store up): once B has read one item (`warm_up`: its first read from a peer's
  segment sets up the transfer connection, longer than a step's bound), cold == local exactly (the same K/V bytes, the same prompt, the same
  engine), B loaded every item token from the store (its report: `store_hits`), and pooled
  scores differ from causal ones (else no load could be told apart);
- `down` (the caller stopped the store): once each replica's store watch has seen it go
  (`store_losses`; a restart inside the watch's poll would go unseen and set nothing up
  again), the same cold prompt on B is answered, its failed
  reads are counted, and its scores equal the causal ones (vLLM recomputed the items:
  `kv_load_failure_policy: recompute`), never a wrong pooled answer;
- `refill` (the caller started the store again, empty): new items filled through A are
  written to the new store and served to B from it, as in `served`.
"""

import argparse, json, random, sys, time, urllib.request


def post(url, body, timeout=120):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def report(answer):
    return (answer.get("kv_transfer_params") or {}).get("recache_pool", {})


def score(up, model, tokens, labels, salt, params=None):
    body = {"model": model, "prompt": tokens, "max_tokens": 1, "temperature": 0,
            "logprobs": 1, "logprob_token_ids": labels, "return_tokens_as_token_ids": True,
            "cache_salt": salt}
    if params is not None:
        body["kv_transfer_params"] = params
    out = post(up + "/v1/completions", body)
    top = out["choices"][0]["logprobs"]["top_logprobs"][0]
    return [top[f"token_id:{l}"] for l in labels], report(out)


def stats(up, model):
    """The connector's counters (a list request claims and stores nothing)."""
    out = post(up + "/v1/completions", {"model": model, "prompt": [0], "max_tokens": 1,
                                        "kv_transfer_params": {"recache_pool": {"list": True}}})
    return report(out)


def wait_stat(ups, model, field, want, what, limit_s=60.0):
    """Waits until every replica's connector reports `field` >= `want` (each list request is
    an engine step, which ships the worker's counts)."""
    deadline = time.monotonic() + limit_s
    while True:
        got = [stats(up, model).get(field, 0) for up in ups]
        if all(n >= want for n in got):
            return got
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} {got}, not {want} each, within {limit_s:.0f} s")


def wait_connected(ups, model, want, limit_s=60.0):
    """Waits until every replica's connector reports `want` store client set-ups in all (the
    worker sets its client up in the background at start and again when a store it lost comes
    back)."""
    return wait_stat(ups, model, "store_connects", want, "store clients set up", limit_s)


def wait_lost(ups, model, want, limit_s=60.0):
    """Waits until every replica's store watch has seen the store stop answering `want` times
    in all: a restart sooner than the watch's poll would go unseen (the client would carry
    on, and nothing would be set up again)."""
    return wait_stat(ups, model, "store_losses", want, "store losses seen", limit_s)


def wait_puts(up, model, want, limit_s=60.0):
    """Waits until A's connector has written `want` fills to the store in all (they are
    written in the background, after the fill's step); returns its stats."""
    deadline = time.monotonic() + limit_s
    while True:
        s = stats(up, model)
        if s.get("store_puts", 0) >= want:
            return s
        if time.monotonic() > deadline:
            raise SystemExit(f"A wrote {s.get('store_puts')} fills to the store, not {want}, "
                             f"within {limit_s:.0f} s: {json.dumps(s)}")
        # Each list request is one engine step, the event the background put waits behind.


def warm_up(A, B, model, tag, rng, limit_s=60.0):
    """Waits until B has read one item from the store: B's first read from the store
    client that holds a value sets up the transfer connection to it (about 0.5 s here,
    seconds after a store restart), longer than a step's bound, so that read is a counted miss
    (recomputed). Fills one item through A and sends B prompts holding it cold, each a new
    request, until one is served from the store; returns how many reads it took."""
    seg = [256] + [rng.randrange(400, 4000) for _ in range(40)]
    key = f"{model}/{tag}-warm"
    before = stats(A, model).get("store_puts", 0)
    post(A + "/v1/completions", {"model": model, "prompt": seg, "max_tokens": 1,
                                  "kv_transfer_params": {"recache_pool": {"fill": key}}})
    wait_puts(A, model, before + 1)
    deadline = time.monotonic() + limit_s
    for tries in range(1, 1000):
        hits = stats(B, model).get("store_hits", 0)
        score(B, model, seg + [7, 8, 9], [256], f"{tag}-warm-{tries}-{time.time_ns()}",
              {"recache_pool": {"segments": [[key, 0, len(seg)]], "cold": [key]}})
        if stats(B, model).get("store_hits", 0) > hits:
            return tries
        if time.monotonic() > deadline:
            raise SystemExit(f"B read nothing from the store in {tries} tries within "
                             f"{limit_s:.0f} s: {json.dumps(stats(B, model))[:600]}")


def build(tag, model, n_items, item_tokens, user_tokens, rng):
    word = lambda n: [rng.randrange(400, 4000) for _ in range(n)]
    labels = [256 + k for k in range(n_items)]
    items = [[labels[k]] + word(item_tokens) for k in range(n_items)]
    tokens, segments = [], []
    for k, seg in enumerate(items):
        segments.append([f"{model}/{tag}-{k}", len(tokens), len(seg)])
        tokens += seg
    tokens += word(user_tokens) + word(12)
    return items, labels, tokens, segments


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="replica A (fills)")
    ap.add_argument("--b", required=True, help="replica B (reads the store)")
    ap.add_argument("--model", default="tiny-qwen2")
    ap.add_argument("--phase", choices=["served", "down", "refill"], required=True)
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--item-tokens", type=int, default=40)
    ap.add_argument("--user-tokens", type=int, default=200)
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--min-connects", type=int, default=1,
                    help="store client set-ups each replica must report first (2 after a restart)")
    ap.add_argument("--min-losses", type=int, default=1,
                    help="store losses each replica's watch must report first (phase down)")
    a = ap.parse_args()
    A, B = a.a.rstrip("/"), a.b.rstrip("/")
    # `down` reuses `served`'s items (A still holds them; the store is gone).
    seed = a.seed + (1 if a.phase == "refill" else 0)
    rng = random.Random(seed)
    tag = f"cold{seed}-{rng.randrange(1 << 30)}"
    items, labels, tokens, segments = build(tag, a.model, a.items, a.item_tokens,
                                            a.user_tokens, rng)
    region = sum(len(s) for s in items)
    salt = f"{tag}-{a.phase}-{time.time_ns()}"
    out = {"phase": a.phase, "items": a.items, "item_region_tokens": region}
    if a.phase == "down":
        out["store_losses"] = wait_lost([A, B], a.model, a.min_losses)
    else:
        # A store the engines have not reached yet (at start, after a restart) serves nothing.
        out["store_connects"] = wait_connected([A, B], a.model, a.min_connects)
        before = stats(A, a.model).get("store_puts", 0)
        for (key, _, _), seg in zip(segments, items):
            post(A + "/v1/completions", {"model": a.model, "prompt": seg, "max_tokens": 1,
                                          "kv_transfer_params": {"recache_pool": {"fill": key}}})
        out["a_stats"] = {k: v for k, v in wait_puts(A, a.model, before + a.items).items()
                          if k != "list"}
    if a.phase != "down":
        out["warmup_reads"] = warm_up(A, B, a.model, tag, rng)
    keys = [s[0] for s in segments]
    b0 = stats(B, a.model)
    local, local_rep = score(A, a.model, tokens, labels, salt + "-a",
                             {"recache_pool": {"segments": segments}})
    cold, cold_rep = score(B, a.model, tokens, labels, salt + "-b",
                           {"recache_pool": {"segments": segments, "cold": keys}})
    causal, _ = score(B, a.model, tokens, labels, salt + "-c")
    b1 = stats(B, a.model)
    d = lambda x, y: max(abs(p - q) for p, q in zip(x, y))
    delta = lambda f: b1.get(f, 0) - b0.get(f, 0)
    out.update({
        "local_loaded_tokens": local_rep.get("loaded_tokens"),
        "cold_loaded_tokens": cold_rep.get("loaded_tokens"),
        "b_store_hits": delta("store_hits"), "b_store_misses": delta("store_misses"),
        "b_store_loaded_tokens": delta("store_loaded_tokens"),
        "b_entries": b1.get("entries"),
        "cold_vs_local": d(cold, local), "cold_vs_causal": d(cold, causal),
        "local_vs_causal": d(local, causal), "tol": a.tol,
    })
    checks = {"A loaded every item from its pool": out["local_loaded_tokens"] == region,
              "B filled nothing itself": out["b_entries"] == 0}
    if a.phase == "down":
        checks.update({
            "B counted every failed read": out["b_store_misses"] >= a.items
            and out["b_store_hits"] == 0,
            "B's answer equals the causal one (items recomputed)":
                out["cold_vs_causal"] <= 1e-6,
        })
    else:
        checks.update({
            "B read every item from the store": out["b_store_hits"] == a.items
            and out["b_store_misses"] == 0,
            "B claimed every item token": out["cold_loaded_tokens"] == region,
            "cold scores equal local ones": out["cold_vs_local"] <= 1e-6,
            "pooled scores differ from causal ones": out["local_vs_causal"] > a.tol,
        })
    out["failed"] = [k for k, ok in checks.items() if not ok]
    print(json.dumps(out))
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
