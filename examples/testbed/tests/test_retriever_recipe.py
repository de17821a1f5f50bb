"""The retrieval model's recipe runs end to end and is deterministic (issue 59; docs/retrieve.md).

Run with the vLLM testbed venv's Python (tests/run does), after `cargo test` built
target/debug/recache. On a synthetic data set in the Amazon files' formats (`recache bench
synth`: no ../shared needed) and its `recache items index`, it trains the recipe
(retriever/train.py HP) cut to a few steps, twice, and checks:
- both runs write the same weights (steps, not seconds): "deterministic for a seed";
- the served model's full-vocabulary log-probabilities equal the trained ones (the export
  check's bound), its output rows outside the trained range are zero, and the index it was
  trained on is in the checkpoint;
- the prompt is `c(h1) id(h1) SEP c(h2) id(h2) ...` (what `bench retrieve --prompt codes`
  sends);
- `--ready` says yes for that recipe and no for another, without training.
Each run takes ~15 s on 2 cores.
"""
import json, os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(TESTBED))
HOME = os.environ.get("RECACHE_TESTBED_HOME", os.path.expanduser("~/.cache/recache-testbed"))
TOKENIZER = os.path.join(HOME, "models", "tiny-qwen2")
BIN = os.path.join(REPO, "target", "debug", "recache")
SHORT = {"steps": 6, "warmup": 2, "dev_users": 3, "batch": 16, "bucket": 2}


def synth(root):
    os.makedirs(os.path.join(root, "amazon"))
    os.makedirs(os.path.join(root, "items"))
    items = os.path.join(root, "items", "Industrial_and_Scientific.item.json")
    subprocess.run([BIN, "bench", "synth", "--out-data", os.path.join(root, "amazon",
                    "Beauty.txt"), "--out-items", items, "--users", "2000", "--items", "1500"],
                   check=True, stdout=subprocess.DEVNULL)
    index = os.path.join(root, "index.json")
    subprocess.run([BIN, "items", "index", "--items", items, "--out", index], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return index


def train(data, index, out, hp, *extra):
    return subprocess.run([sys.executable, os.path.join(TESTBED, "train_retriever.py"),
                           "--out", out, "--tokenizer", TOKENIZER, "--data-dir", data,
                           "--index", index, "--hp", json.dumps(hp), *extra],
                          capture_output=True, text=True)


def main():
    if not os.path.exists(os.path.join(TOKENIZER, "tokenizer.json")):
        sys.exit(f"{TOKENIZER} missing: run examples/testbed/up --install-only first")
    sys.path.insert(0, TESTBED)
    from retriever import prompt
    assert prompt.user_tokens([([5, 6], 0), ([7, 8, 9], 3)]) == [
        5, 6, prompt.ID_BASE, prompt.SEP, 7, 8, 9, prompt.ID_BASE + 3]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        index = synth(data)
        outs = [os.path.join(tmp, f"run{i}") for i in (1, 2)]
        for out in outs:
            r = train(data, index, out, SHORT)
            assert r.returncode == 0, r.stderr[-3000:]
            assert r.stdout.strip() == out, r.stdout
        weights = [open(os.path.join(o, "model.safetensors"), "rb").read() for o in outs]
        assert weights[0] == weights[1], "two runs of one recipe and seed differ"
        report = json.load(open(os.path.join(outs[0], "retriever-report.json")))
        assert report["export_check_max_abs"] < 1e-3, report["export_check_max_abs"]
        assert set(report["dev"]) == {"model", "popularity", "users"}, report["dev"]
        assert open(os.path.join(outs[0], "retrieval-index.json")).read() == open(index).read()

        from safetensors.torch import load_file
        head = load_file(os.path.join(outs[0], "model.safetensors"))["lm_head.weight"]
        hi = max(t for it in json.load(open(index))["items"] for t in it["code"])
        assert head[:prompt.SEP].abs().max().item() == 0, "rows below SEP are not zero"
        assert head[hi + 1:].abs().max().item() == 0, "rows above the codes are not zero"
        assert head[prompt.SEP:hi + 1].abs().max().item() > 0, "the trained rows are zero"

        ready = train(data, index, outs[0], SHORT, "--ready")
        assert ready.returncode == 0, ready.stderr
        other = train(data, index, outs[0], {**SHORT, "seed": 1}, "--ready")
        assert other.returncode == 1, other.stderr
        assert not os.path.exists(os.path.join(tmp, "run1.tmp")), "--ready trained"
    print("retriever recipe: deterministic run, export check, zero rows, index, --ready: ok")


if __name__ == "__main__":
    main()
