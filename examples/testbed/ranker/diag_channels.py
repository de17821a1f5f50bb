#!/usr/bin/env python3
"""Diagnostic for issue 21 (not part of training): can the comparison the channels would build
rank at all? A pure-torch stand-in for the transformer's item and user channels, trained in
minutes: an item's vector is the mean of learnt token rows over its 18 title tokens (what a
positional head averaging the item's own title tokens writes at its item end), the user's
query a mean over the user's side of the prompt (`--user`: `profile` = the history items'
title tokens; `all` = every text token before the final one, profile, candidates and
instruction alike: what a head that cannot tell the profile from the candidates sees), the
score a bilinear form plus a per-item term. Trained with the rank cross-entropy plus
distillation to the teacher; prints dev Recall@10/NDCG@10 (489 dev users, 100 candidates
drawn as training draws them) next to the teacher and popularity.

Run with the testbed venv's Python from examples/testbed:
  ranker/diag_channels.py --tokenizer DIR --data-dir ../../../shared/data [--user profile|all]
"""
import argparse, math, os, random, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ranker import data as rdata, layout, teacher as teach  # noqa: E402

N_TOK, HIST = 18, 20


def metrics(scores, target):
    rank = int((scores > scores[target]).sum())
    return rank < 10, (1 / math.log2(rank + 2) if rank < 10 else 0.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--user", default="profile", choices=("profile", "all", "recency"))
    ap.add_argument("--dims", type=int, default=24)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--kd", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--decay", type=float, default=0.0, help="title tokens weighted "
                    "exp(-decay * tokens before the item end) (a positional head's profile; 0: "
                    "uniform)")
    ap.add_argument("--mlp", type=int, default=0, help="hidden width of an MLP on the bag "
                    "(residual; 0: none)")
    ap.add_argument("--probe", type=float, default=0.0, help="weight of an MSE of a linear "
                    "probe of the item vector towards the teacher's [prior, E] of its title")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.tokenizer)
    d = rdata.Data(os.path.join(a.data_dir, "amazon/Beauty.txt"),
                   os.path.join(a.data_dir, "items/Industrial_and_Scientific.item.json"))
    titles = torch.tensor([layout.fit(tok(t, add_special_tokens=False)["input_ids"], N_TOK)
                           for t in d.titles])  # [T, 18]
    instr = torch.tensor(tok(layout.DEFAULT_INSTRUCTION, add_special_tokens=False)["input_ids"])
    vocab = int(max(titles.max(), instr.max())) + 1
    te = teach.Teacher(d, 32, HIST)
    emb = torch.nn.Parameter(0.1 * torch.randn(vocab, a.dims))
    bil = torch.nn.Parameter(torch.zeros(a.dims, a.dims))
    bias = torch.nn.Parameter(torch.zeros(a.dims))
    params = [emb, bil, bias]
    mlp = None
    if a.mlp:
        mlp = torch.nn.Sequential(torch.nn.Linear(a.dims, a.mlp), torch.nn.GELU(),
                                  torch.nn.Linear(a.mlp, a.dims))
        params += list(mlp.parameters())
    tv = torch.cat([te.prior[:, None], te.e], 1)
    tmean, tstd = tv.mean(0), tv.std(0) + 1e-6
    tv = (tv - tmean) / tstd
    probe = torch.nn.Linear(a.dims, tv.shape[1])
    params += list(probe.parameters())
    opt = torch.optim.Adam(params, lr=a.lr)
    rng = random.Random(a.seed)
    events = [(u, t) for u, (_, h) in enumerate(d.users) if d.split[u] == "train"
              for t in range(1, len(h))]
    title = d.title_of

    pw = torch.softmax(-a.decay * torch.arange(N_TOK - 1, -1, -1).float(), 0)

    def bags(ts):
        b = (pw[:, None] * emb[titles[ts]]).sum(-2)
        return b if mlp is None else b + mlp(b)

    def query(hist, cands):
        recent = [title(i) for i in hist[-HIST:]]
        hb = bags(recent)
        if a.user == "profile":
            return hb.mean(0)
        if a.user == "recency":
            w = torch.tensor([0.7 ** (len(recent) - 1 - k) for k in range(len(recent))])
            return (w[:, None] * hb).sum(0) / w.sum()
        cb = bags(cands)  # every text token before the final one, equally weighted
        n_i = len(instr)
        return ((hb.sum(0) + cb.sum(0)) * N_TOK + emb[instr].sum(0)) / (
            N_TOK * (len(recent) + len(cands)) + n_i)

    def scores(hist, cands):
        ts = [title(c) for c in cands]
        q = query(hist, ts)
        return bags(ts) @ (bil @ q + bias)

    def evaluate():
        r = random.Random(12345)
        out = {"model": [0, 0], "teacher": [0, 0], "popularity": [0, 0], "probe": [0, 0]}
        with torch.no_grad():
            allt = torch.arange(len(d.titles))
            pv = probe(bags(allt))
            out["probe_mse"] = F.mse_loss(pv, tv).item()
            pv = pv * tstd + tmean
            for (_, h), sp in zip(d.users, d.split):
                if sp != "dev":
                    continue
                cands = d.candidates(r, [h[-1]], 100)
                r.shuffle(cands)
                tgt = cands.index(h[-1])
                for k, s in (("model", scores(h[:-1], cands)),
                             ("teacher", te.scores(h[:-1], cands)),
                             ("probe", probe_scores(pv, h[:-1], cands)),
                             ("popularity", torch.tensor([float(d.count[c]) for c in cands]))):
                    hit, nd = metrics(s, tgt)
                    out[k][0] += hit
                    out[k][1] += nd
        n = sum(s == "dev" for s in d.split)
        return {k: (round(v[0] / n, 4), round(v[1] / n, 4)) if isinstance(v, list) else
                round(v, 3) for k, v in out.items()}

    def probe_scores(pv, hist, cands):
        """The teacher's formula on the probe's reading of the item vectors."""
        rec = [title(i) for i in hist[-HIST:]]
        w = torch.tensor([0.7 ** (len(rec) - 1 - k) for k in range(len(rec))])
        ts = [title(c) for c in cands]
        return pv[ts, 1:] @ (w[:, None] * pv[rec, 1:]).sum(0) + pv[ts, 0]

    t0 = time.time()
    avg = None
    for step in range(a.steps):
        loss = 0.0
        for _ in range(a.batch):
            u, t = events[rng.randrange(len(events))]
            h = d.users[u][1]
            cands = d.candidates(rng, [h[t]], 100)
            s = scores(h[:t], cands)
            tt = te.scores(h[:t], cands)
            tt = tt / (tt.std() + 1e-6)
            loss = loss + F.cross_entropy(s[None], torch.tensor([0])) + a.kd * F.kl_div(
                F.log_softmax(s, 0), F.log_softmax(tt, 0), log_target=True, reduction="sum")
        loss = loss / max(a.batch, 1)  # --batch 0: the probe alone
        if a.probe:
            ts = torch.tensor([title(d.draw(rng)) for _ in range(256)])
            pl = F.mse_loss(probe(bags(ts)), tv[ts])
            loss = loss + a.probe * pl
        opt.zero_grad()
        loss.backward()
        opt.step()
        avg = loss.item() if avg is None else 0.98 * avg + 0.02 * loss.item()
        if (step + 1) % 250 == 0:
            print(f"step {step + 1} loss {avg:.3f} probe {pl.item() if a.probe else 0:.3f} "
                  f"{time.time() - t0:.0f}s", flush=True)
    print({"user": a.user, "dims": a.dims, "steps": a.steps, "decay": a.decay, "mlp": a.mlp, "probe": a.probe, **evaluate()}, flush=True)


if __name__ == "__main__":
    main()
