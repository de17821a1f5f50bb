#!/usr/bin/env python3
"""Owns the testbed's generative-retrieval checkpoint (`examples/testbed/up --model retriever`
serves it): a Qwen2 of the tiny testbed model's shape trained here, on this machine's CPU, to
write the next item's semantic-ID code after a user's history of codes.

Run with the testbed venv's Python: train_retriever.py --out DIR --tokenizer TINY_QWEN2_DIR
--data-dir SHARED_DATA_DIR --index ITEMS_INDEX. Prints the checkpoint directory on stdout;
progress on stderr.
- Codes: the `recache items index` file of the item catalog (`up` builds it with that
  command's defaults); it is copied into the checkpoint as `retrieval-index.json`, the index
  recache must serve with this model (`--retrieve-index`).
- Task and prompt: retriever/prompt.py (the contract with `bench retrieve --prompt codes`);
  training: retriever/train.py (HP). Data: Amazon Beauty with ranker/data.py's user split: 5%
  held out (`recache bench retrieve --quality` ranks them), 2% dev (the report's check), the
  rest train.
- Deterministic for a seed (seeded everything, steps rather than seconds, two torch threads).
- `--ready`: exit 0 when --out holds the current recipe's checkpoint, 1 when `up` would train.
Written to a temp dir and renamed into place with a stamp of the recipe and the digests of the
data, catalog and index, so a change retrains and a crash never leaves a checkpoint that later
runs would trust.
"""
import argparse, json, os, shutil, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
DATA = "amazon/Beauty.txt"
ITEMS = "items/Industrial_and_Scientific.item.json"
VERSION = 2  # bump when the training code changes what it makes

from train_ranker import digest, log  # noqa: E402  (the same stamp digests and stderr log)


def recipe(hp, data_dir, index):
    from retriever import train
    return json.dumps({"retriever": VERSION, "hp": {**train.HP, **hp},
                       "config": train.CONFIG,
                       "data": digest(os.path.join(data_dir, DATA)),
                       "items": digest(os.path.join(data_dir, ITEMS)),
                       "index": digest(index)}, sort_keys=True)


def check_export(trainer, compact, full):
    """The served model's full-vocabulary log-probabilities equal the trained ones."""
    import random, torch
    ids, mask, rows, cols, gold = trainer.batch(random.Random(1), trainer.train[:4])
    back = trainer.full_ids()[ids]
    with torch.no_grad():
        a = -torch.nn.functional.cross_entropy(
            torch.cat([compact.model(input_ids=ids, attention_mask=mask)
                       .last_hidden_state[rows, cols]
                       @ compact.lm_head.weight[1:1 + trainer.out_rows].T,
                       torch.full((len(gold), 1), trainer.other)], 1), gold, reduction="none")
        lp = torch.log_softmax(full(input_ids=back, attention_mask=mask).logits[rows, cols], -1)
        b = lp[torch.arange(len(gold)), back[rows, cols + 1]]
    worst = (a - b).abs().max().item()
    if worst > 1e-3:
        raise SystemExit(f"[retriever] trained and served log-probabilities differ by {worst}")
    return worst


def make(out, tokenizer_dir, data_dir, index, hp, stamp):
    import torch
    from transformers import AutoTokenizer
    from ranker import data as rdata
    from retriever import prompt as P, train
    torch.set_num_threads(2)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    t0, c0 = time.time(), time.process_time()
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    pad = tok.encode("\n", add_special_tokens=False)
    if len(pad) != 1:
        raise SystemExit(f"[retriever] the tokenizer writes \"\\n\" as {pad}, not one token")
    data = rdata.Data(os.path.join(data_dir, DATA), os.path.join(data_dir, ITEMS))
    _, codes = P.load_index(index)
    keys = P.catalog_keys(os.path.join(data_dir, ITEMS))
    missing = [k for k in keys if k not in codes]
    if missing:
        raise SystemExit(f"[retriever] {index} lacks {len(missing)} titled items (e.g. "
                         f"{missing[0]}): build it from {ITEMS}")
    trainer = train.Trainer(data, keys, codes, pad[0], {**train.HP, **hp}, log)
    compact, full = trainer.run()
    worst = check_export(trainer, compact, full)
    t1 = time.time()
    dev = trainer.dev_metrics(full)
    log(f"[retriever] dev: {dev}")
    full.to(torch.bfloat16).save_pretrained(tmp)
    tok.save_pretrained(tmp)
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        src = os.path.join(tokenizer_dir, name)
        if os.path.exists(src):  # the testbed's loader-compatible spelling of both
            shutil.copy(src, os.path.join(tmp, name))
    shutil.copy(index, os.path.join(tmp, "retrieval-index.json"))
    report = {"train_wall_s": round(t1 - t0), "train_cpu_s": round(time.process_time() - c0),
              "dev": dev, "dev_eval_s": round(time.time() - t1), "export_check_max_abs": worst,
              "users": {s: data.split.count(s) for s in ("train", "dev", "test")},
              "loss": trainer.loss_curve, "popular": trainer.popular, "pad_token": pad[0],
              "sep_token": P.SEP, "torch": torch.__version__}
    with open(os.path.join(tmp, "retriever-report.json"), "w") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(tmp, "recache-testbed-stamp"), "w") as f:
        f.write(stamp + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    log(f"[retriever] wrote {out}: dev {json.dumps(dev)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="checkpoint directory")
    ap.add_argument("--tokenizer", required=True, help="the testbed model's directory")
    ap.add_argument("--data-dir", required=True, help="folder with amazon/ and items/")
    ap.add_argument("--index", required=True, help="`recache items index` file of the catalog")
    ap.add_argument("--hp", default="{}", help="JSON overrides of retriever/train.py's HP "
                    "(experiments and short test runs; part of the stamp)")
    ap.add_argument("--ready", action="store_true", help="exit 0 if --out holds the current "
                    "recipe's checkpoint, 1 if it would be trained; trains nothing")
    a = ap.parse_args()
    for p in (os.path.join(a.data_dir, DATA), os.path.join(a.data_dir, ITEMS), a.index):
        if not os.path.exists(p):
            raise SystemExit(f"[retriever] {p} not found")
    hp = json.loads(a.hp)
    stamp = recipe(hp, a.data_dir, a.index)
    path = os.path.join(a.out, "recache-testbed-stamp")
    current = os.path.exists(path) and open(path).read().strip() == stamp
    if a.ready:
        log(f"[testbed] retriever {'ready' if current else 'not trained yet'}: {a.out}")
        sys.exit(0 if current else 1)
    if current:
        log(f"[testbed] retriever ready (cached): {a.out}")
    else:
        log(f"[testbed] training the retrieval model into {a.out} (CPU, two threads)")
        make(a.out, a.tokenizer, a.data_dir, a.index, hp, stamp)
    print(a.out)


if __name__ == "__main__":
    main()
