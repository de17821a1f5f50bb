#!/usr/bin/env python3
"""Owns the testbed's GR ranker checkpoint (`examples/testbed/up --model ranker` serves it):
a small Qwen2 trained here, on this machine's CPU, to rank candidates the way recache asks.

Run with the testbed venv's Python: train_ranker.py --out DIR --tokenizer TINY_QWEN2_DIR
--data-dir SHARED_DATA_DIR. Prints the checkpoint directory on stdout; progress on stderr.
- Task: prompt = a user's history (last 20 items) + 100 candidates with label tokens +
  recache's default instruction, built exactly as recache builds them (ranker/layout.py,
  checked against the Rust code by tests/tests/engine_ranker_prompt.rs); target = the label of
  the user's next item. Items are their own id tokens (item i: token 20480 + i; `recache bench
  quality --item-id-base 20480 --item-tokens 1`), labels start at 4096 (`--rank-label-base
  4096`). Layouts: user-first, item-first, and item-first with the item KV pool (items alone
  at a shared start position), labels over both ranges recache uses.
- Data: Amazon Beauty (`amazon/Beauty.txt`), item i titled by `items/Industrial_and_
  Scientific.item.json` entry i mod count, as `recache bench gr` does. Users are split by a
  hash of their id (ranker/data.py = sidecar/src/bench/quality/split.rs): 5% held out for
  `recache bench quality`, 2% dev (progress only), the rest train; held-out and dev users'
  interactions never reach training.
- Model: Qwen2ForCausalLM, 4 layers, hidden 128, 1 head (head dim 128), FFN 512, tied
  embeddings, the testbed tokenizer's 65,536 ids, 16,384 positions; ranker/hp.py (HP) and
  ranker/plain.py say how it is trained: 2,000 steps of everything, then 3,000 of the last
  layer's attention alone (~25 min on 2 cores). Deterministic for a seed: one torch thread,
  seeded everything, steps rather than seconds.
- On a GPU (`--device cuda --export FILE`, what `train_ranker_device` runs where a device is
  lent): the same recipe with larger batches and a wall-clock budget (`budget_s` in --hp);
  the trained weights come back as FILE and `--import FILE` here checks them against the HF
  forward and writes the checkpoint, stamped as device-trained. `up --model ranker` keeps a
  device-trained checkpoint of the current recipe version and data: it cannot be remade here.
- `--ready`: exit 0 when the checkpoint at --out is the current recipe's (or an import of
  it), 1 when `up --model ranker` would train; trains nothing (the quickstart asks first).
Written to a temp dir and renamed into place with a stamp of the recipe and the data files'
digests, so a changed recipe or data retrains and a crash never leaves a checkpoint that
later runs would trust.
"""
import argparse, hashlib, json, os, shutil, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DATA = "amazon/Beauty.txt"
ITEMS = "items/Industrial_and_Scientific.item.json"
VERSION = 3  # bump when the training code changes what it makes


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def recipe(hp, data_dir):
    from ranker import train
    return json.dumps({"ranker": VERSION, "hp": train.recipe_hp(hp),
                       "data": digest(os.path.join(data_dir, DATA)),
                       "items": digest(os.path.join(data_dir, ITEMS))}, sort_keys=True)


def check_served_layouts(trainer, model):
    """The trained weights through HF's own forward on the flattened prompts (explicit
    positions and 4-D masks) must give the training forward's scores: what vLLM computes
    from the checkpoint is what was trained."""
    import torch
    from ranker import model as fwd
    worst = 0.0
    for kind in trainer.layouts():
        u = trainer.dev[0]
        b = (trainer.s.up([u], 100) if kind == "up" else trainer.s.after_user([u], 100)
             if kind == "aup" else trainer.s.group(kind, [u], 100))
        with torch.no_grad():
            ours = trainer.scores(b)[0]
        tokens, segments = fwd.flatten(b)
        ref = fwd.hf_reference(model, tokens, segments, b["labels"][0])
        worst = max(worst, (ours - ref).abs().max().item())
    if worst > 1e-3:
        raise SystemExit(f"[ranker] training forward and HF forward disagree by {worst}")
    return worst


def log(s):
    print(s, file=sys.stderr, flush=True)


def trainer_for(tokenizer_dir, data_dir, hp, device="cpu"):
    from transformers import AutoTokenizer
    from ranker import data as rdata, train
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    data = rdata.Data(os.path.join(data_dir, DATA), os.path.join(data_dir, ITEMS))
    return tok, data, train.Trainer(data, tok, train.recipe_hp(hp), log, device)


def export(path, tokenizer_dir, data_dir, hp, device):
    """Trains on `device` and writes the trained tensors (the embedding rows training touches,
    every other weight once) and the run's report to `path` (a torch.save file)."""
    import torch
    t0 = time.time()
    _, _, trainer = trainer_for(tokenizer_dir, data_dir, hp, device)
    model = trainer.run()
    dev = trainer.dev_metrics()
    log(f"[ranker] dev recall@10/ndcg@10 per layout: {dev}")
    used = trainer.used
    state = {k: v.detach().float().cpu() for k, v in model.state_dict().items()
             if k not in ("model.embed_tokens.weight", "lm_head.weight")
             and "rotary_emb" not in k}
    state["embed_rows"] = model.model.embed_tokens.weight.detach()[:used].float().cpu().clone()
    report = {"train_wall_s": round(time.time() - t0), "dev": dev, "device": str(device),
              "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
              "steps": trainer.steps_run, "hp": {**trainer.hp}, "torch": str(torch.__version__),
              **getattr(trainer, "extra_report", {})}
    torch.save({"state": state, "report": report}, path)
    log(f"[ranker] exported {path}: {json.dumps(report)}")


def load(trainer, path):
    """The weights of an export into the trainer's (CPU) model: the full tied embedding keeps
    its initial rows beyond the trained ones (ids no prompt holds; they only shift every
    label's log-probability alike)."""
    import torch
    blob = torch.load(path, map_location="cpu", weights_only=True)
    model = trainer.finish()
    # Buffers (RoPE's inverse frequencies) are rebuilt from the config: not taken from the run.
    state = {k: v for k, v in blob["state"].items() if "rotary_emb" not in k}
    rows = state.pop("embed_rows")
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"model.embed_tokens.weight", "lm_head.weight"}:
        raise SystemExit(f"[ranker] {path} does not fit this recipe: missing {missing}, "
                         f"unexpected {unexpected}")
    with torch.no_grad():
        model.model.embed_tokens.weight[:rows.shape[0]] = rows
    return model, blob["report"]


# Experiment switches of the removed recipe VERSION 2, all off in VERSION 3: exports made
# before its code was removed carry them in their hp; not overrides (nothing reads them).
V2_SWITCHES = ("item_dims", "bag_decay", "window_reach", "window_iters", "score_pairs",
               "score_gain", "item_probe", "seed_gain", "mid_frozen", "end_flag", "read_temp",
               "read_frozen", "main_ce", "att_ce", "score_fix", "enc_frozen", "end_gate")


def overrides(run_hp):
    """An export's recipe overrides: its hp where it differs from the recipe's."""
    from ranker import train
    base = train.recipe_hp({})
    return {k: v for k, v in run_hp.items() if k not in V2_SWITCHES and base.get(k) != v}


def make(out, tokenizer_dir, data_dir, hp, stamp, imported=None):
    import torch
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    t0, c0 = time.time(), time.process_time()
    tok, data, trainer = trainer_for(tokenizer_dir, data_dir, hp)
    if imported:
        model, device_report = load(trainer, imported)
        dev = device_report["dev"]
    else:
        model, device_report = trainer.run(), None
        dev = trainer.dev_metrics()
    log(f"[ranker] dev recall@10/ndcg@10 per layout: {dev}")
    worst = check_served_layouts(trainer, model)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        src = os.path.join(tokenizer_dir, name)
        if os.path.exists(src):  # the testbed's loader-compatible spelling of both
            shutil.copy(src, os.path.join(tmp, name))
    report = {"train_wall_s": round(time.time() - t0), "train_cpu_s": round(
        time.process_time() - c0), "dev": dev, "hf_check_max_abs": worst,
              "users": {s: data.split.count(s) for s in ("train", "dev", "test")},
              "torch": torch.__version__}
    if device_report:
        report["trained_on"] = device_report
    else:  # steps per stage, each stage's loss curve
        report["steps"] = trainer.steps_run
        report.update(getattr(trainer, "extra_report", {}))
    with open(os.path.join(tmp, "ranker-report.json"), "w") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(tmp, "recache-testbed-stamp"), "w") as f:
        f.write(stamp + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    log(f"[ranker] wrote {out}: {json.dumps(report)}")


def device_trained(path, stamp):
    """A checkpoint imported from a device run of this recipe version on these data files:
    kept by the default recipe (it is the same code with larger batches and more steps, and
    cannot be remade on this machine)."""
    if not os.path.exists(path):
        return False
    try:
        have = json.loads(open(path).read())
    except ValueError:
        return False
    want = json.loads(stamp)
    return "trained_on" in have and all(have.get(k) == want[k] for k in ("ranker", "data",
                                                                        "items"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="checkpoint directory")
    ap.add_argument("--tokenizer", required=True, help="the testbed model's directory")
    ap.add_argument("--data-dir", required=True, help="folder with amazon/ and items/")
    ap.add_argument("--hp", default="{}", help="JSON overrides of ranker/hp.py's HP "
                    "(experiments; part of the stamp)")
    ap.add_argument("--device", default="cpu", help="torch device to train on (with --export)")
    ap.add_argument("--export", metavar="FILE", help="train on --device and write the weights "
                    "to FILE instead of a checkpoint (device runs; --out is not touched)")
    ap.add_argument("--import", dest="imported", metavar="FILE", help="make the checkpoint "
                    "from an --export FILE (its recipe overrides come with it) instead of "
                    "training")
    ap.add_argument("--ready", action="store_true", help="exit 0 if --out holds the current "
                    "recipe's checkpoint (or an import of it), 1 if it would be trained; "
                    "trains nothing")
    a = ap.parse_args()
    for rel in (DATA, ITEMS):
        if not os.path.exists(os.path.join(a.data_dir, rel)):
            raise SystemExit(f"[ranker] {os.path.join(a.data_dir, rel)} not found "
                             "(set RECACHE_TESTBED_RANKER_DATA to the folder holding it)")
    hp = json.loads(a.hp)
    if a.export:
        export(a.export, a.tokenizer, a.data_dir, hp, a.device)
        return
    if a.imported:
        import torch
        report = torch.load(a.imported, map_location="cpu", weights_only=True)["report"]
        hp = overrides(report["hp"])
        stamp = json.dumps({**json.loads(recipe(hp, a.data_dir)),
                            "trained_on": report.get("gpu") or report["device"]},
                           sort_keys=True)
        make(a.out, a.tokenizer, a.data_dir, hp, stamp, a.imported)
        print(a.out)
        return
    stamp = recipe(hp, a.data_dir)
    path = os.path.join(a.out, "recache-testbed-stamp")
    current = os.path.exists(path) and open(path).read().strip() == stamp
    if a.ready:
        ok = current or (not hp and device_trained(path, stamp))
        print(f"[testbed] ranker {'ready' if ok else 'not trained yet'}: {a.out}",
              file=sys.stderr)
        sys.exit(0 if ok else 1)
    if current:
        print(f"[testbed] ranker ready (cached): {a.out}", file=sys.stderr)
    elif not hp and device_trained(path, stamp):
        print(f"[testbed] ranker ready (cached, imported from an --export run on "
              f"{json.loads(open(path).read())['trained_on']}): {a.out}", file=sys.stderr)
    else:
        print(f"[testbed] training the GR ranker into {a.out} (CPU, one thread: ~25 min)",
              file=sys.stderr)
        make(a.out, a.tokenizer, a.data_dir, hp, stamp)
    print(a.out)


if __name__ == "__main__":
    main()
