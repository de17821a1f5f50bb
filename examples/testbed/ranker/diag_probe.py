#!/usr/bin/env python3
"""Diagnostic for issue 21 (not part of training): how far the ranker's learnt representations
are from a ranking, with the readout taken out of the question. After `--enc-steps` steps of
the encoder stage, dev users' next items are ranked (user-first prompts, 100 candidates) by
the training probes' own outputs compared as the teacher compares its vectors (title probe at
each item end, user probe at the final token), next to the teacher restricted to the probes'
dims (the ceiling of that comparison) and the full teacher. Also prints the title probe's MSE
at the item ends of those prompts (targets standardized: 1.0 = predicting the mean).

Run with the testbed venv's Python from examples/testbed:
  ranker/diag_probe.py --tokenizer DIR --data-dir ../../../shared/data [--enc-steps N] [--users N]
"""
import argparse, os, sys, time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ranker import data as rdata, model as fwd, train  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--enc-steps", type=int, default=1200)
    ap.add_argument("--users", type=int, default=200)
    a = ap.parse_args()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    d = rdata.Data(os.path.join(a.data_dir, "amazon/Beauty.txt"),
                   os.path.join(a.data_dir, "items/Industrial_and_Scientific.item.json"))
    hp = {**train.HP, "enc_steps": a.enc_steps, "steps": 0, "dev_users": a.users}
    tr = train.Trainer(d, tok, hp, print)
    t0 = time.time()
    for step in range(a.enc_steps):
        loss = tr.encoder_loss()
        tr.step(loss, tr.lr(step, a.enc_steps, hp["enc_lr"]))
        if (step + 1) % 100 == 0:
            print(f"encoder step {step + 1} loss {loss.item():.3f} {time.time() - t0:.0f}s",
                  flush=True)
    te, dims = tr.teacher, hp["probe_dims"]
    vm, vs = te.item_scale(dims)
    t1, t2 = tr.taps()
    hits = {"probes": 0, f"teacher_{dims}_dims": 0, "teacher": 0}
    mse = 0.0
    with torch.no_grad():
        tr.s.rng.seed(12345)
        for u in tr.dev:
            b = tr.s.up([u], 100)
            out = fwd.forward_group(tr.model, b, tap=(t1, t2))
            ends = b["last"][0, :-1]
            raw = tr.probe(out["users_tap"][t1][0, ends])
            mse += ((raw - tr.vecs[b["cand_titles"][0]]) ** 2).mean().item()
            titles = raw * vs + vm
            query = (tr.user_probe(out["users_tap"][t2][0, b["last"][0, -1]]) * tr.user_std +
                     tr.user_mean)
            cands = b["candidates"][0]
            ts = [te.title(c) for c in cands]
            uv = te.user_vector(u["history"])
            scores = {"probes": titles[:, 1:] @ query + titles[:, 0],
                      f"teacher_{dims}_dims": te.e[ts][:, :dims] @ uv[:dims] + te.prior[ts],
                      "teacher": te.scores(u["history"], cands)}
            target = int(b["target"][0])
            for k, s in scores.items():
                hits[k] += int((s > s[target]).sum()) < 10
    n = len(tr.dev)
    print({"enc_steps": a.enc_steps, "users": n, "title_probe_mse": round(mse / n, 3),
           **{f"recall_at_10_{k}": round(h / n, 3) for k, h in hits.items()}})


if __name__ == "__main__":
    main()
