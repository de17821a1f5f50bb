"""The testbed's qwen2-1.5b-shape model is Qwen2-1.5B's layer, and flops.py counts right.

- make_model.KINDS["qwen2-1.5b-shape"] has Qwen2-1.5B's hidden size, FFN, heads, KV heads
  (head dim 128), rope theta and RMS eps, 2 layers, and the testbed tokenizer's 65,536 ids
  (room for recache's labels and item ids: label base 256 + 128 + a 12,101-item catalog,
  and the ranker's item ids from 20480); the tiny model's recipe is unchanged, so cached
  checkpoints stay valid;
- bench/src/testbed/model.rs's fallback geometry (used before a checkpoint is made) is the
  recipes' own;
- flops.py's numbers for the tiny config equal a hand computation, and the rounded ratios
  quoted for the two (~5e-4 tiny, ~7e-5 Qwen2-1.5B) come out;
- a made checkpoint's config.json (when the testbed home has one) says what KINDS says; a
  missing one shows as skipped. Pure Python, no engine.
"""
import json, os, re, sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(TESTBED))
sys.path.insert(0, TESTBED)
import flops  # noqa: E402
import make_model  # noqa: E402

SHAPE = "qwen2-1.5b-shape"


def check_shape_config():
    c = make_model.KINDS[SHAPE]["config"]
    want = dict(hidden_size=1536, intermediate_size=8960, num_attention_heads=12,
                num_key_value_heads=2, num_hidden_layers=2, rope_theta=1000000.0,
                rms_norm_eps=1e-6, tie_word_embeddings=True)
    assert c == want, c
    assert c["hidden_size"] // c["num_attention_heads"] == 128
    # recache's default label base (256) + 128 + every Amazon Beauty item; the ranker's ids.
    assert 256 + 128 + 12101 <= make_model.VOCAB and 20480 + 12101 <= make_model.VOCAB
    assert make_model.KINDS["tiny"]["recipe"] == (
        "tiny-qwen2 recipe=4 vocab=4096+filler=65536 layers=4 hidden=256 heads=4/2 "
        "pos=16384 seed=0"), "the tiny recipe changed: every cached tiny checkpoint is remade"


def check_rust_fallback():
    src = open(os.path.join(REPO, "bench/src/testbed/model.rs")).read()
    for kind, variant in (("tiny", "Tiny"), (SHAPE, "Qwen2Shape")):
        m = re.search(rf"ModelKind::{variant} => \((\d+), (\d+), (\d+)\)", src)
        assert m, f"no recipe geometry for {variant} in model.rs"
        c = make_model.KINDS[kind]["config"]
        want = (c["num_hidden_layers"], c["num_key_value_heads"],
                c["hidden_size"] // c["num_attention_heads"])
        assert tuple(map(int, m.groups())) == want, (kind, m.groups(), want)


def check_tiny_by_hand():
    r = flops.shape(flops.testbed_configs()["tiny"])
    h, f, d, heads, kv = 256, 1024, 64, 4, 2
    linear = 2 * (h * h + h * kv * d + h * kv * d + h * h + 3 * h * f)
    assert linear == 1966080 == r["linear_flops_per_token_per_layer"], r
    assert r["attention_flops_per_pair_per_layer"] == 4 * heads * d == 1024
    assert r["linear_flops_per_token"] == 4 * linear
    assert r["lm_head_flops_per_token"] == 2 * h * 65536
    assert r["kv_bytes_per_token_bf16"] == 2048
    assert abs(r["pair_over_token"] - 1024 / 1966080) < 1e-15
    assert r["pairs_at_parity"] == 1920


def check_quoted_ratios():
    rows = {r["model"]: r for r in flops.report()["rows"]}
    assert round(rows["tiny"]["pair_over_token"], 4) == 0.0005, rows["tiny"]
    assert round(rows["Qwen2-1.5B"]["pair_over_token"], 5) == 0.00007, rows["Qwen2-1.5B"]
    # The shape model's ratio and KV per layer are Qwen2-1.5B's.
    for k in ("pair_over_token", "linear_flops_per_token_per_layer",
              "attention_flops_per_pair_per_layer"):
        assert rows[SHAPE][k] == rows["Qwen2-1.5B"][k], k
    assert rows[SHAPE]["kv_bytes_per_token_bf16"] * 14 == rows["Qwen2-1.5B"]["kv_bytes_per_token_bf16"]


def check_made_config():
    home = os.environ.get("RECACHE_TESTBED_HOME", os.path.expanduser("~/.cache/recache-testbed"))
    path = os.path.join(home, "models", SHAPE, "config.json")
    if not os.path.exists(path):
        print(f"SKIPPED: {path} not made (examples/testbed/up --model {SHAPE} --install-only)")
        return
    with open(path) as fh:
        made = json.load(fh)
    for k, v in make_model.KINDS[SHAPE]["config"].items():
        got = made.get(k, made.get("rope_parameters", {}).get(k))  # transformers 5 nests rope
        assert got == v, (k, got, v)
    assert made["vocab_size"] == make_model.VOCAB and made["max_position_embeddings"] == 16384
    assert flops.shape(made) == flops.shape(flops.testbed_configs()[SHAPE])


def main():
    check_shape_config()
    check_rust_fallback()
    check_tiny_by_hand()
    check_quoted_ratios()
    check_made_config()
    print("testbed cost shape: qwen2-1.5b-shape is Qwen2-1.5B's layer; flops.py counts right: ok")


if __name__ == "__main__":
    main()
