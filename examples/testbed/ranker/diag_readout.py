#!/usr/bin/env python3
"""Diagnostic for issue 21 (not part of training): where a trained export's ranking is lost
between the readout's comparison and the label logits. For dev users, per layout: Recall@10
of the served label scores ("final"), of the readout head's own attention logits over the
prompt's item ends ("readout", model.readout_logits), and, in user-first prompts, the share
of the readout's attention that lands on item ends at all ("mass_on_item_ends"; uniform
attention would give about 100 / prompt length, ~0.045). `--flag-mult X` scales the readout
key's weight on the label flag first (does a louder flag bring the attention to the ends?).

Run with the testbed venv's Python from examples/testbed:
  ranker/diag_readout.py EXPORT.pt --tokenizer DIR --data-dir ../../../shared/data [--users N]
"""
import argparse, json, os, sys

import torch
from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import train_ranker  # noqa: E402
from ranker import train  # noqa: E402
from ranker.diag_attn import dev_scores  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("export")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--users", type=int, default=150)
    ap.add_argument("--flag-mult", type=float, default=1.0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    blob = torch.load(a.export, map_location="cpu", weights_only=True)
    hp = {k: v for k, v in blob["report"]["hp"].items() if train.HP.get(k) != v}
    hp["dev_users"] = a.users
    _, _, tr = train_ranker.trainer_for(a.tokenizer, a.data_dir, hp)
    model, _ = train_ranker.load(tr, a.export)
    last = tr.hp["layers"] - 1
    attn = model.model.layers[-1].self_attn
    d = attn.head_dim
    h = tr.hp["heads"] - 1
    flag = tr.hp["hidden"] - d
    with torch.no_grad():
        attn.k_proj.weight[h * d + d // 2 - 1, flag] *= a.flag_mult
    res = {}
    with torch.no_grad():
        for kind, users in dev_scores(tr, model, last):
            hits = {"final": 0, "readout": 0}
            mass = 0.0
            for b, out, final, ro, tg in users:
                hits["final"] += int((final > final[tg]).sum()) < 10
                hits["readout"] += int((ro > ro[tg]).sum()) < 10
                if kind == "up":  # the readout's whole attention at the final token
                    n = int(b["last"][0, -1]) + 1
                    x = model.model.layers[-1].input_layernorm(out["users_tap"][last][0, :n])
                    q = attn.q_proj(x[-1:]).view(1, -1, d)[:, h]
                    k = attn.k_proj(x).view(n, -1, d)[:, h]
                    cos, sin = model.model.rotary_emb(x[None], torch.arange(n)[None])
                    k, _ = apply_rotary_pos_emb(k[None, None], k[None, None], cos, sin)
                    q, _ = apply_rotary_pos_emb(q[None, None], q[None, None], cos[:, -1:],
                                                sin[:, -1:])
                    att = torch.softmax((q[0, 0] @ k[0, 0].T)[0] * attn.scaling, 0)
                    mass += att[b["last"][0, :-1]].sum().item()
            res[kind] = {k: round(v / len(tr.dev), 3) for k, v in hits.items()}
            if kind == "up":
                res[kind]["mass_on_item_ends"] = round(mass / len(tr.dev), 3)
    print(json.dumps({"export": a.export, "users": len(tr.dev), "flag_mult": a.flag_mult,
                      **res}))


if __name__ == "__main__":
    main()
