#!/usr/bin/env python3
"""Correctness of recache's item KV pool on a live engine: vLLM (testbed `up --item-pool`,
the KV connector) or SGLang (`--engine sglang`: `up --engine sglang --item-pool`, the external
unified-cache linker `recache_shim.sglang_item_pool`).

Run with the testbed venv's Python: item_pool_check.py --upstream URL --model-dir DIR
[--engine sglang]. Prints one JSON line with the measured differences and exits non-zero
when a check fails. On SGLang the plan goes as `sampling_params.custom_params.recache_pool`
(a JSON string) on `/generate`, the report comes back as `meta_info.recache_pool`, and the
engine's count of loaded tokens is `meta_info.cached_tokens_details.host`.

What it compares, for one item-as-prefix prompt `[L0 I0][L1 I1]..[U][instr]`:
- `pool`: vLLM with every item segment loaded from the pool (each filled before by a request
  holding only that segment, i.e. computed alone from position 0);
- `ref_pool`: the tiny HF Qwen2 (float32) on the same tokens with explicit position ids
  (every item segment at 0..len-1, user/instruction at their token index) and a 4-D mask
  (causal inside a segment, no attention across segments, user/instruction see everything
  before them) — the layout rule the pool implements;
- `causal` / `ref_causal`: the same prompt as a plain causal prompt (the calibration: how far
  vLLM's bf16 is from the float32 reference when nothing differs but arithmetic).
- `pool_pos` / `ref_pos`: segments sent with ``pos`` = their start (K re-rotated to the true
  position, recache's ``--rank-pool-recompute ...:pos=true``) against the reference with
  every segment at its token index (still no attention across segments);
- `pool_link` / `ref_link`: ``link:k=2`` — every item's first two tokens sent again after the
  pooled run and computed there in context;
- `pool_after_user` / `ref_after`: the user-first prompt with the pool, `[U][L0 I0]..[instr]`
  with U whole blocks the engine caches first (a request of U alone), the segments after it
  with ``pos`` = len(U) (their shared start there) — the connector loads what continues the
  engine's own prefix hit.
Checks: |pool - ref_pool| <= tol (label log-probabilities, nats), and the same for pos and
link; the pooled request reports
every segment loaded (kv_transfer_params) and raises vllm:external_prefix_cache_hits_total;
the same request again (new cache_salt, same pool) gives the same scores; and pooled scores
differ from causal ones by more than tol (else the test could not tell a load happened).
"""

import argparse, json, random, sys, urllib.request

import torch


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def metric(upstream, name):
    with urllib.request.urlopen(upstream + "/metrics", timeout=30) as r:
        text = r.read().decode()
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines()
               if l.startswith(name) and l[len(name)] in "{ ")


def fill(upstream, model, tokens, key, engine):
    plan = {"fill": key}
    if engine == "sglang":
        post(upstream + "/generate", {"input_ids": tokens, "sampling_params": {
            "max_new_tokens": 1, "temperature": 0,
            "custom_params": {"recache_pool": json.dumps(plan)}}})
    else:
        post(upstream + "/v1/completions", {"model": model, "prompt": tokens, "max_tokens": 1,
                                             "kv_transfer_params": {"recache_pool": plan}})


def report(answer, engine) -> dict:
    if engine == "sglang":
        return ((answer.get("meta_info") or {}).get("recache_pool") or [{}])[-1]
    return (answer.get("kv_transfer_params") or {}).get("recache_pool", {})


def score(upstream, model, tokens, labels, salt, params=None, engine="vllm"):
    if engine == "sglang":
        sp = {"max_new_tokens": 1, "temperature": 0}
        if params is not None:
            sp["custom_params"] = {"recache_pool": json.dumps(params["recache_pool"])}
        out = post(upstream + "/generate", {"input_ids": tokens, "sampling_params": sp,
                                             "return_logprob": True, "logprob_start_len": -1,
                                             "token_ids_logprob": labels, "cache_salt": salt})
        by_id = {e[1]: e[0] for e in out["meta_info"]["output_token_ids_logprobs"][0]}
        return [by_id[l] for l in labels], out
    body = {"model": model, "prompt": tokens, "max_tokens": 1, "temperature": 0,
            "logprobs": 1, "logprob_token_ids": labels, "return_tokens_as_token_ids": True,
            "cache_salt": salt}
    if params is not None:
        body["kv_transfer_params"] = params
    out = post(upstream + "/v1/completions", body)
    top = out["choices"][0]["logprobs"]["top_logprobs"][0]
    return [top[f"token_id:{l}"] for l in labels], out


def reference(model, tokens, labels, segments, true_pos=False, base=0):
    """Label log-probs at the last position under the pool's layout (segments=[] → causal);
    `true_pos`: segments keep their token index as position (K re-rotated by the connector);
    `base`: the shared start position of the segments (after a user prefix)."""
    n = len(tokens)
    pos = torch.arange(n)
    allowed = torch.ones(n, n).tril().bool()
    for start, length in segments:
        if not true_pos:
            pos[start:start + length] = torch.arange(length) + base
        # A segment's tokens see only their own segment (causal), nothing before it.
        allowed[start:start + length, :start] = False
    mask = torch.zeros(1, 1, n, n)
    mask[0, 0][~allowed] = torch.finfo(torch.float32).min
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens]), position_ids=pos[None],
                       attention_mask=mask).logits[0, -1].float()
    lp = torch.log_softmax(logits, -1)
    return [lp[l].item() for l in labels]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--model", default="tiny-qwen2")
    ap.add_argument("--items", type=int, default=8)
    ap.add_argument("--item-tokens", type=int, default=18)
    ap.add_argument("--user-tokens", type=int, default=300)
    ap.add_argument("--tol", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    a = ap.parse_args()
    sc = lambda *args: score(*args, engine=a.engine)  # noqa: E731
    rng = random.Random(a.seed)
    tag = f"check{rng.randrange(1 << 30)}"
    word = lambda n: [rng.randrange(400, 4000) for _ in range(n)]
    labels = [256 + k for k in range(a.items)]
    items = [[labels[k]] + word(a.item_tokens) for k in range(a.items)]
    tokens, segments, spans = [], [], []
    for k, seg in enumerate(items):
        key = f"{a.model}/{tag}-{k}"
        segments.append([key, len(tokens), len(seg)])
        spans.append((len(tokens), len(seg)))
        tokens += seg
    tokens += word(a.user_tokens) + word(12)
    up = a.upstream.rstrip("/")
    for (key, _, _), seg in zip(segments, items):
        fill(up, a.model, seg, key, a.engine)
    vllm = a.engine == "vllm"
    ext0 = metric(up, "vllm:external_prefix_cache_hits_total") if vllm else 0
    params = {"recache_pool": {"segments": segments}}
    pool, answer = sc(up, a.model, tokens, labels, f"{tag}-p1", params)
    ext1 = (metric(up, "vllm:external_prefix_cache_hits_total") if vllm else
            ((answer.get("meta_info") or {}).get("cached_tokens_details") or {}).get("host", 0))
    again, _ = sc(up, a.model, tokens, labels, f"{tag}-p2", params)
    causal, _ = sc(up, a.model, tokens, labels, f"{tag}-c")
    at = [[k, st, n, st] for k, st, n in segments]
    pool_pos, _ = sc(up, a.model, tokens, labels, f"{tag}-pos", {"recache_pool": {"segments": at}})
    run = sum(len(seg) for seg in items)
    link = [t for seg in items for t in seg[:2]]
    linked = tokens[:run] + link + tokens[run:]
    pool_link, _ = sc(up, a.model, linked, labels, f"{tag}-link", params)
    # After a cached user prefix (whole blocks): the user-first prompt with the pool.
    lead = word(-(-a.user_tokens // 32) * 32)
    after = lead + [t for seg in items for t in seg] + word(12)
    sc(up, a.model, lead + word(1), labels, f"{tag}-u")  # caches the user prefix
    shifted = [[k, st + len(lead), n, len(lead)] for k, st, n in segments]
    pool_after, answer_after = sc(up, a.model, after, labels, f"{tag}-u",
                                  {"recache_pool": {"segments": shifted}})
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(a.model_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    ref_pool = reference(model, tokens, labels, spans)
    ref_causal = reference(model, tokens, labels, [])
    ref_pos = reference(model, tokens, labels, spans, true_pos=True)
    ref_link = reference(model, linked, labels, spans)
    after_spans = [(st + len(lead), n) for st, n in spans]
    ref_after = reference(model, after, labels, after_spans, base=len(lead))
    ref_after_causal = reference(model, after, labels, [])
    d = lambda x, y: max(abs(p - q) for p, q in zip(x, y))
    info_after = report(answer_after, a.engine)
    info = report(answer, a.engine)
    item_region = sum(len(s) for s in items)
    out = {
        "engine": a.engine,
        "tol": a.tol,
        "pool_vs_ref_pool": d(pool, ref_pool),
        "causal_vs_ref_causal": d(causal, ref_causal),
        "pool_vs_causal": d(pool, causal),
        "ref_pool_vs_ref_causal": d(ref_pool, ref_causal),
        "pool_again_vs_pool": d(again, pool),
        "pool_pos_vs_ref_pos": d(pool_pos, ref_pos),
        "ref_pos_vs_ref_pool": d(ref_pos, ref_pool),
        "pool_pos_vs_ref_pool": d(pool_pos, ref_pool),
        "pool_link_vs_ref_link": d(pool_link, ref_link),
        "ref_link_vs_ref_pool": d(ref_link, ref_pool),
        "pool_after_user_vs_ref": d(pool_after, ref_after),
        "ref_after_user_vs_causal": d(ref_after, ref_after_causal),
        "after_user_loaded_tokens": info_after.get("loaded_tokens"),
        "loaded_tokens": info.get("loaded_tokens"),
        "item_region_tokens": item_region,
        "external_hits_delta": ext1 - ext0,
        "present": len(info.get("present", [])),
    }
    checks = {
        "pool matches the layout reference": out["pool_vs_ref_pool"] <= a.tol,
        "causal matches the causal reference": out["causal_vs_ref_causal"] <= a.tol,
        "pooled differs from causal": out["pool_vs_causal"] > a.tol,
        "repeat is identical": out["pool_again_vs_pool"] <= 1e-6,
        "pos=true matches the true-position reference": out["pool_pos_vs_ref_pos"] <= a.tol,
        # The tiny random model moves little with RoPE (~0.015 nats): what shows the
        # re-rotation happened is that vLLM lands nearer the true-position reference.
        "pos=true is nearer its reference than the shared start's":
            out["pool_pos_vs_ref_pos"] < out["pool_pos_vs_ref_pool"],
        "link tokens match their reference": out["pool_link_vs_ref_link"] <= a.tol,
        "link tokens change the scores": out["ref_link_vs_ref_pool"] > a.tol,
        "every item token loaded": out["loaded_tokens"] == item_region,
        "after a cached user: matches its reference": out["pool_after_user_vs_ref"] <= a.tol,
        "after a cached user: the reference is not causal": out["ref_after_user_vs_causal"] > a.tol,
        "after a cached user: every item token loaded":
            out["after_user_loaded_tokens"] == item_region,
        "engine counted external hits": out["external_hits_delta"] >= item_region,
    }
    out["failed"] = [k for k, ok in checks.items() if not ok]
    print(json.dumps(out))
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
