#!/usr/bin/env python3
"""Diagnostic for issue 21 (not part of training): where the readout head (last layer, last
head) looks at each dev user's final token, in UP, pooled and IP prompts: the share of its
attention on the 100 item ends, on the 100 label tokens and on everything else, plus Recall@10
of the readout's own logits over item ends ("readout") and of the served label logits
("final"), the rank correlation between the two ("rank_corr") and the label logits' spread
("final_std": near 0, the label logits are flat whatever the readout picks) and the readout
logits' spread ("readout_std") and the share of the readout's top 10 that the label logits'
top 10 hold ("top10_overlap": 1.0, the label logits rank as the readout does where it counts). `--score-mult 1,3,10` repeats it with the readout key's score
rows scaled by each factor (an attention temperature applied after the fact: does a sharper
readout make the label logits follow it?). Without an export it measures a fresh trainer at init (after `--enc-steps` encoder
steps and the readout seeding), i.e. what a built-in construction gives before any training.

Run with the testbed venv's Python from examples/testbed:
  ranker/diag_attn.py --tokenizer DIR --data-dir ../../../shared/data --hp '{...}' [--export X.pt]
"""
import argparse, json, os, sys

import torch
from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import train_ranker  # noqa: E402
from ranker import model as fwd  # noqa: E402


def attention_split(model, b, out, tap, item_tokens):
    """(mass on item ends, mass on labels) of the readout at the first user's final token."""
    layer = model.model.layers[-1]
    a = layer.self_attn
    d = a.head_dim
    h = a.q_proj.weight.shape[0] // d - 1
    final = int(b["last"][0, -1])
    q = a.q_proj(layer.input_layernorm(tap[0, final])).view(-1, d)[h]
    cos, sin = model.model.rotary_emb(q[None, None], torch.tensor([[b["user_start"] + final]]))
    q, _ = apply_rotary_pos_emb(q[None, None, None], q[None, None, None], cos, sin)
    q = q[0, 0, 0]
    keys, kind = [], []
    if b["pooled"] is not None:
        k = out["pooled_kv"][-1][0][:, h]  # [S, L, d]
        s, length = k.shape[:2]
        c = torch.zeros(s, length, dtype=torch.long)
        c[:, -1], c[:, 0] = 1, 2
        keys.append(k.reshape(-1, d))
        kind.append(c.reshape(-1))
    if b["tail"] is not None:
        k = out["tail_kv"][-1][0][0, h]
        c = torch.zeros(k.shape[0], dtype=torch.long)
        c[b["tail_ends"]] = 1
        c[b["tail_ends"] - item_tokens] = 2
        keys.append(k)
        kind.append(c)
    k = out["users_kv"][-1][0][0, h, :final + 1]
    c = torch.zeros(final + 1, dtype=torch.long)
    if b["pooled"] is None and b["tail"] is None:
        e = b["last"][0, :-1]
        c[e] = 1
        c[e - item_tokens] = 2
    keys.append(k)
    kind.append(c)
    keys, kind = torch.cat(keys), torch.cat(kind)
    att = torch.softmax(keys @ q * a.scaling, 0)
    return att[kind == 1].sum().item(), att[kind == 2].sum().item()


def dev_scores(tr, model, last):
    """Per layout (UP, pooled, IP), the layout and a generator over dev users of (batch,
    forward outputs, served label scores, the readout's logits over item ends, target index);
    the same candidates for every call (a fixed sampler seed)."""
    for kind in ("up", "pool", "ip"):
        tr.s.rng.seed(12345)
        yield kind, _users(tr, model, last, kind)


def _users(tr, model, last, kind):
    for u in tr.dev:
        b = tr.s.up([u], 100) if kind == "up" else tr.s.group(kind, [u], 100)
        out = fwd.forward_group(model, b, tap=(last,))
        final = fwd.label_scores(model, out["users"][:, -1:], b["labels"])[0, 0]
        ro = fwd.readout_logits(model, b, out, out["users_tap"][last])[0]
        yield b, out, final, ro, int(b["target"][0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--hp", default="{}")
    ap.add_argument("--export")
    ap.add_argument("--users", type=int, default=60)
    ap.add_argument("--score-mult", default="1")
    a = ap.parse_args()
    torch.set_num_threads(1)
    hp = json.loads(a.hp)
    if a.export:
        blob = torch.load(a.export, map_location="cpu", weights_only=True)
        from ranker import train
        hp = {**{k: v for k, v in blob["report"]["hp"].items() if train.HP.get(k) != v}, **hp}
    hp["dev_users"] = a.users
    _, _, tr = train_ranker.trainer_for(a.tokenizer, a.data_dir, hp)
    if a.export:
        model, _ = train_ranker.load(tr, a.export)
    else:
        for step in range(hp.get("enc_steps_diag", 0)):
            tr.step(tr.encoder_loss(), tr.hp["enc_lr"])
        if tr.it is not None:
            tr.seed_readout()
        model = tr.model
    last = tr.hp["layers"] - 1
    mults = [float(m) for m in a.score_mult.split(",")]
    k = model.model.layers[-1].self_attn.k_proj
    d = k.weight.shape[0] // tr.hp["heads"]
    rows = [(tr.hp["heads"] - 1) * d + d // 2 - 2 - j for j in range(tr.hp["score_pairs"])]
    w0, b0 = k.weight[rows].detach().clone(), k.bias[rows].detach().clone()
    for m in mults:
        with torch.no_grad():
            k.weight[rows], k.bias[rows] = w0 * m, b0 * m
        res = measure(tr, model, last)
        print(json.dumps({"hp": a.hp, "export": a.export, "users": len(tr.dev),
                          "score_mult": m, **res}), flush=True)


def measure(tr, model, last):
    res = {}
    with torch.no_grad():
        for kind, users in dev_scores(tr, model, last):
            hits = {"final": 0, "readout": 0}
            ends = labels = corr = spread = ro_spread = overlap = 0.0
            for b, out, final, ro, tg in users:
                hits["final"] += int((final > final[tg]).sum()) < 10
                hits["readout"] += int((ro > ro[tg]).sum()) < 10
                rf, rr = final.argsort().argsort().float(), ro.argsort().argsort().float()
                corr += torch.corrcoef(torch.stack([rf, rr]))[0, 1].item()
                spread += final.std().item()
                ro_spread += ro.std().item()
                top = set(final.topk(10).indices.tolist()) & set(ro.topk(10).indices.tolist())
                overlap += len(top) / 10
                e, l = attention_split(model, b, out, out["users_tap"][last], tr.hp["item_tokens"])
                ends += e
                labels += l
            n = len(tr.dev)
            res[kind] = {**{k: round(v / n, 3) for k, v in hits.items()},
                         "on_ends": round(ends / n, 3), "on_labels": round(labels / n, 3),
                         "rank_corr": round(corr / n, 3), "final_std": round(spread / n, 3),
                         "readout_std": round(ro_spread / n, 3),
                         "top10_overlap": round(overlap / n, 3)}
    return res


if __name__ == "__main__":
    main()
