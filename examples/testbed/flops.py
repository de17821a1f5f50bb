#!/usr/bin/env python3
"""Owns the cost-shape arithmetic of a Qwen2 model: from its config alone (nothing is run or
measured), per layer and per model, the linear FLOPs one token costs, the attention FLOPs one
query-key pair costs, and their ratio: how many tokens' worth of linear work one pair of
attention weighs. docs/cost-shape.md is its table.

- linear per token and layer: 2 x the weights of q, k, v, o and the MLP's gate, up and down
  projections (a multiply and an add per weight; Qwen2's q/k/v biases and the norms are left
  out: under 0.1% of it);
- attention per query-key pair and layer: 2 x heads x head_dim for the score (QK^T) and as
  much again for the weighted sum of values (PV): 4 x heads x head_dim (softmax left out);
- the LM head (2 x hidden x vocab per token) counted apart: an engine computes logits only for
  the positions it samples from (the last one of a prefill), not for every prompt token.

Models: the testbed's (`make_model.KINDS`, the exact arguments its config.json is written
from), Qwen2-1.5B's and Qwen2-7B's published configs (embedded below), and any config.json
given with --config. Stdlib only: `python3 examples/testbed/flops.py [--config FILE]...`
prints one JSON document (docs/data/flops-per-shape.json).
"""
import argparse, json, os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_model  # noqa: E402  (stdlib at import: torch is imported inside its functions)

# The published config.json of each (huggingface.co/Qwen/<name>), the fields used here.
PUBLISHED = {
    "Qwen2-1.5B": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                       num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                       tie_word_embeddings=True),
    "Qwen2-7B": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                     num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                     tie_word_embeddings=False),
}


# A long GR prompt: the causal prefill the attention share is given for.
PROMPT = 6500


def attn_share(linear, pair, prompt):
    """Attention's share of a layer's work over a causal prefill of `prompt` tokens."""
    pairs = prompt * (prompt + 1) // 2
    return pairs * pair / (pairs * pair + prompt * linear)


def testbed_configs():
    """The testbed's models as make_model writes their config.json (name: config)."""
    return {kind: dict(spec["config"], vocab_size=make_model.VOCAB)
            for kind, spec in make_model.KINDS.items()}


def shape(cfg):
    """FLOP counts of one Qwen2 config (a config.json's fields)."""
    h, f = cfg["hidden_size"], cfg["intermediate_size"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    layers, vocab = cfg["num_hidden_layers"], cfg["vocab_size"]
    d = cfg.get("head_dim") or h // heads
    attn_weights = h * heads * d + 2 * h * kv_heads * d + heads * d * h  # q, k, v, o
    mlp_weights = 3 * h * f  # gate, up, down
    linear = 2 * (attn_weights + mlp_weights)
    pair = 4 * heads * d
    return {
        "hidden_size": h, "intermediate_size": f, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": d, "num_hidden_layers": layers,
        "vocab_size": vocab,
        "linear_flops_per_token_per_layer": linear,
        "attention_flops_per_pair_per_layer": pair,
        "linear_flops_per_token": linear * layers,
        "attention_flops_per_pair": pair * layers,
        "lm_head_flops_per_token": 2 * h * vocab,
        # Layers scale both alike: the per-layer ratio is the model's.
        "pair_over_token": pair / linear,
        # Earlier tokens a token attends to for its attention to cost as much as its linear work.
        "pairs_at_parity": round(linear / pair),
        # A causal prefill of PROMPT tokens: each attends to itself and all before it.
        f"attention_share_{PROMPT}_token_prefill": round(attn_share(linear, pair, PROMPT), 4),
        # KV bytes of one token (K and V, every layer, 16-bit): what a cached token occupies.
        "kv_bytes_per_token_bf16": 2 * 2 * kv_heads * d * layers,
    }


def rows(extra_paths=()):
    out = []
    for name, cfg in testbed_configs().items():
        out.append(dict(model=name, source="examples/testbed/make_model.py KINDS", **shape(cfg)))
    for name, cfg in PUBLISHED.items():
        out.append(dict(model=name, source=f"huggingface.co/Qwen/{name} config.json (embedded)",
                        **shape(cfg)))
    for path in extra_paths:
        with open(path) as fh:
            out.append(dict(model=os.path.basename(os.path.dirname(os.path.abspath(path))),
                            source=path, **shape(json.load(fh))))
    return out


def report(extra_paths=()):
    """The whole JSON document: what it is, how it counts, one row per model."""
    return {
        "what": "FLOPs of a Qwen2 model computed from its config (not measured): linear work "
                "per token, attention per query-key pair, their ratio; per layer and per model",
        "command": "python3 examples/testbed/flops.py"
                   + "".join(f" --config {p}" for p in extra_paths),
        "counting": {
            "linear": "2 x weights of q, k, v, o, gate, up, down per layer (biases, norms, "
                      "rotary and the activation left out)",
            "attention_pair": "4 x heads x head_dim per layer: QK^T and PV (softmax left out)",
            "lm_head": "apart (lm_head_flops_per_token): engines compute logits only for the "
                       "positions they sample from",
        },
        "rows": rows(extra_paths),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", action="append", default=[],
                    help="a Qwen2 config.json to add (repeatable)")
    a = ap.parse_args()
    print(json.dumps(report(a.config), indent=1))


if __name__ == "__main__":
    main()
