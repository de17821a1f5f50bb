"""The GR ranker's recipe runs end to end and is deterministic (issue 21; docs/quality.md).

Run with the vLLM testbed venv's Python (tests/run does), after `cargo test` built
target/debug/recache. On a synthetic data set in the Amazon files' formats (`recache bench
synth`: no ../shared needed) it trains the recipe (ranker/hp.py HP) cut to a few steps of
each stage, twice, and checks:
- both runs write the same weights (steps, not seconds; one worker whose batches are waited
  for): what "deterministic for a seed" promises;
- the report names both stages' steps, and the HF forward agrees with the training forward
  (the checkpoint is what vLLM serves);
- the label rows have the scale the recipe gives them (hp label_gain, frozen: label_frozen);
- `--ready` says yes for that recipe and no for another, without training;
- a `tune` stage on `aup` batches (the pool after a cached profile: `--rank-pool-after-user`)
  runs, its layout joins the dev metrics, and the HF check covers it.
Each run takes ~20 s on 2 cores.
"""
import json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(TESTBED))
HOME = os.environ.get("RECACHE_TESTBED_HOME", os.path.expanduser("~/.cache/recache-testbed"))
TOKENIZER = os.path.join(HOME, "models", "tiny-qwen2")
# A few steps of each stage, few dev users: the recipe's code paths, not its quality.
SHORT = {"steps": 6, "dev_users": 3, "log_every": 3,
         "then": {"steps": 4, "warmup": 2, "train_only": "layers.3.self_attn,model.norm",
                  "aux_point": 1.0, "aux_item": 0.0, "aux_label": 0.0, "aux_seq": 0.0}}


def synth(root):
    os.makedirs(os.path.join(root, "amazon"))
    os.makedirs(os.path.join(root, "items"))
    subprocess.run([os.path.join(REPO, "target", "debug", "recache"), "bench", "synth",
                    "--out-data", os.path.join(root, "amazon", "Beauty.txt"),
                    "--out-items", os.path.join(root, "items",
                                                "Industrial_and_Scientific.item.json"),
                    "--users", "2000", "--items", "1500"], check=True, stdout=subprocess.DEVNULL)


def train_ranker(data, out, hp, *extra):
    return subprocess.run([sys.executable, os.path.join(TESTBED, "train_ranker.py"), "--out", out,
                           "--tokenizer", TOKENIZER, "--data-dir", data, "--hp", json.dumps(hp),
                           *extra], capture_output=True, text=True)


def main():
    if not os.path.exists(os.path.join(TOKENIZER, "tokenizer.json")):
        sys.exit(f"{TOKENIZER} missing: run examples/testbed/up --install-only first")
    sys.path.insert(0, TESTBED)
    from ranker import layout, train
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        synth(data)
        outs = [os.path.join(tmp, f"run{i}") for i in (1, 2)]
        for out in outs:
            r = train_ranker(data, out, SHORT)
            assert r.returncode == 0, r.stderr[-3000:]
            assert r.stdout.strip() == out, r.stdout
        weights = [open(os.path.join(o, "model.safetensors"), "rb").read() for o in outs]
        assert weights[0] == weights[1], "two runs of one recipe and seed differ"
        report = json.load(open(os.path.join(outs[0], "ranker-report.json")))
        assert report["steps"] == {"rank": 6, "then": 4}, report["steps"]
        assert report["hf_check_max_abs"] < 1e-3, report["hf_check_max_abs"]
        assert set(report["dev"]) == {"up", "pool", "ip"}, report["dev"]

        import torch
        from safetensors.torch import load_file
        w = load_file(os.path.join(outs[0], "model.safetensors"))["model.embed_tokens.weight"]
        hp = train.recipe_hp(SHORT)
        lo = hp["label_base"]
        hi = lo + layout.MAX_ITEMS + hp["pool_slots"]
        # init rows ~ N(0, 0.02^2) in `hidden` dims, times label_gain: norm ~ 0.02 gain sqrt(h)
        want = 0.02 * hp["label_gain"] * hp["hidden"] ** 0.5
        for name, rows in (("positional", w[lo:lo + layout.MAX_ITEMS]),
                           ("pool slot", w[lo + layout.MAX_ITEMS:hi])):
            got = rows.float().norm(dim=1).mean().item()
            assert abs(got - want) < 0.1 * want, f"{name} label rows' norm {got}, want ~{want}"

        ready = train_ranker(data, outs[0], SHORT, "--ready")
        assert ready.returncode == 0, ready.stderr
        other = train_ranker(data, outs[0], {**SHORT, "seed": 1}, "--ready")
        assert other.returncode == 1, other.stderr
        assert not os.path.exists(os.path.join(tmp, "run1.tmp")), "--ready trained"
        empty = train_ranker(data, os.path.join(tmp, "none"), SHORT, "--ready")
        assert empty.returncode == 1 and not os.path.exists(os.path.join(tmp, "none"))

        tuned = os.path.join(tmp, "tuned")
        r = train_ranker(data, tuned, {**SHORT, "tune": {"steps": 3, "warmup": 1,
                                                         "mix": "aup:1,pool:1"}})
        assert r.returncode == 0, r.stderr[-3000:]
        report = json.load(open(os.path.join(tuned, "ranker-report.json")))
        assert report["steps"] == {"rank": 6, "then": 4, "tune": 3}, report["steps"]
        assert set(report["dev"]) == {"up", "pool", "ip", "aup"}, report["dev"]
        assert report["hf_check_max_abs"] < 1e-3, report["hf_check_max_abs"]
    print("ranker recipe: deterministic two-stage run, HF check, label rows, --ready, aup: ok")


if __name__ == "__main__":
    main()
