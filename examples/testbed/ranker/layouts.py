"""The trained ranker's Recall@10 / NDCG@10 on dev (or test) users under the pooled layout's
serve-time variants, computed by an HF forward with explicit positions and 4-D attention masks:
what vLLM with recache's item-pool connector computes (item_pool_check.py checks that
equivalence on the real engine for pos=true and link), without an engine, so each variant's
quality is measured apart from serving noise.

Variants (comma-separated, `name[:opt=val...]`):
- `up`, `uprev` (user-first, items in request order / reversed), `ip` (item-first, hot-first;
  `ip:labels=slot` gives it the pooled layout's labels, pool slots);
- `pool0`: every candidate resident in the pool (labels from pool slots, each item computed
  alone at a shared start), then profile and instruction; options:
  `pos=true` (pooled K at its true position: the connector's segment `pos`),
  `lmod=L` (each pooled item's label fixed as its id mod L, over the positional labels when
  L <= 128; a candidate whose label another already took is computed in context after the
  run, with a free positional label),
  `labels=pos` (positional labels, as `ip`, instead of pool slots: not servable, since a
  pooled entry is shared by every request; it separates the label from the context),
  `link=N` (first N tokens of every item sent again after the pooled run, in context:
  `--rank-pool-recompute link:k=N`), `hdr=1` (items computed after a header),
  `after=id|label` (that token of every item re-sent after the run),
  `user=first` (`--rank-pool-after-user`: the profile, padded to 32-token blocks, leads; the
  pooled run follows at the position after it, seeing neither it nor each other),
  `readout=item` (any variant: a candidate's score is the final token's logit of its item id
  token, which `aux_item` trains, instead of its label's),
  `sel=label|id` / `blend=R` (tokens recomputed in place, in context: the share R chosen by
  their deviation after two layers, CacheBlend-style; vLLM's connector cannot serve this, see
  docs/quality.md).

    venv-vllm/bin/python examples/testbed/ranker/layouts.py --ckpt DIR \
      --data-dir ../shared/data --variants up,ip,pool0,pool0:link=2 > out.json

Prints JSON: per variant Recall@10/NDCG@10 per seed and their means, the Recall@10 difference
to `up` paired per user (with its standard error), top-10 overlap and Spearman correlation with
`up`. Progress per seed on stderr.
"""
import argparse, json, math, os, random, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch
from transformers import AutoTokenizer, Qwen2ForCausalLM
from ranker import data as rdata, layout

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--ckpt", default=os.path.expanduser("~/.cache/recache-testbed/models/gr-ranker"))
ap.add_argument("--data-dir", default="../shared/data")
ap.add_argument("--split", default="dev", choices=["dev", "test"])
ap.add_argument("--seeds", default="1,2,3")
ap.add_argument("--variants", default="up,ip,pool0,pool0:pos=true")
ap.add_argument("--limit", type=int, default=0, help="first N users only (0: all)")
args = ap.parse_args()
CK, SPLIT = args.ckpt, args.split
SEEDS = [int(s) for s in args.seeds.split(",")]
VARIANTS = args.variants.split(",")
LIMIT = args.limit
torch.set_num_threads(1)
tok = AutoTokenizer.from_pretrained(CK)
model = Qwen2ForCausalLM.from_pretrained(CK, torch_dtype=torch.float32).eval()
D = rdata.Data(os.path.join(args.data_dir, "amazon/Beauty.txt"),
               os.path.join(args.data_dir, "items/Industrial_and_Scientific.item.json"))
instr = tok(layout.DEFAULT_INSTRUCTION, add_special_tokens=False)["input_ids"]
# The testbed ranker's served settings (train_ranker.py): item i is token 20480 + i, labels
# from 4096, pool labels after 128 positional ones.
IDB, LB, MI = 20480, 4096, layout.MAX_ITEMS
HEADER = tok("Candidate items:", add_special_tokens=False)["input_ids"]
PAD = tok(" ", add_special_tokens=False)["input_ids"][-1]  # recache's pad token (pipeline/mod.rs)
users = [(uid, h) for (uid, h), sp in zip(D.users, D.split) if sp == SPLIT]
if LIMIT:
    users = users[:LIMIT]


def item(i):
    return [IDB + i]


def run(tokens, pos, allowed, labels):
    n = len(tokens)
    mask = torch.zeros(1, 1, n, n)
    mask[0, 0][~allowed] = torch.finfo(torch.float32).min
    with torch.no_grad():
        lg = model(input_ids=torch.tensor([tokens]), position_ids=torch.tensor([pos]),
                   attention_mask=mask).logits[0, -1]
    return lg[torch.tensor(labels)]


def build(variant, prof, cands, hot, slots):
    """-> tokens, positions, allowed[n,n], labels (per candidate index)."""
    v = variant.split(":")
    name, opt = v[0], dict(x.split("=") for x in v[1:])
    k = len(cands)
    if name in ("up", "uprev"):
        toks, labs = list(prof), [0] * k
        order = list(range(k)) if name == "up" else list(range(k))[::-1]
        for r, j in enumerate(order):
            labs[j] = LB + r
            toks += [LB + r] + item(cands[j])
        toks += instr
        n = len(toks)
        return toks, list(range(n)), torch.ones(n, n).tril().bool(), labs
    if name == "ip":
        toks, labs = [], [0] * k
        for r, j in enumerate(hot):
            labs[j] = LB + MI + slots[j] if opt.get("labels") == "slot" else LB + r
            toks += [LB + r] + item(cands[j])
        toks += prof + instr
        n = len(toks)
        return toks, list(range(n)), torch.ones(n, n).tril().bool(), labs
    # pooled: every candidate resident, pool labels; options:
    #  pos=shared|true  hdr=0|1 (items computed after HEADER)  link=N (first N tokens of each
    #  item re-sent after the block, in context)  blend=R (share of pooled tokens recomputed in
    #  place, picked by layer-0 K deviation)  sel=label|id (recompute that token of every item)
    hdr = HEADER if opt.get("hdr", "0") == "1" else []
    # user=first (`--rank-pool-after-user`): the profile padded to whole 32-token blocks leads,
    # the pooled items follow at the position right after it, attending to neither it nor
    # each other, and the instruction ends the prompt.
    lead = prof + [PAD] * (-len(prof) % 32) if opt.get("user") == "first" else []
    toks, pos, block, labs = lead + hdr, list(range(len(lead) + len(hdr))), \
        [-3] * len(lead) + [-1] * len(hdr), [0] * k
    spill = []
    if "lmod" in opt:  # pooled label = item id mod L (the positional labels when L <= 128):
        L = int(opt["lmod"])  # fixed per item, so servable; an item whose label another
        used = set()  # candidate already took is computed in context after the run
        pooled = []
        for j in hot:
            lab = LB + cands[j] % L if L <= MI else LB + MI + cands[j] % L
            if lab in used:
                spill.append(j)
            else:
                used.add(lab)
                labs[j] = lab
                pooled.append(j)
        free = (LB + r for r in range(MI) if LB + r not in used)
        for j in spill:
            labs[j] = next(free)
        hot = pooled
    for r, j in enumerate(hot):
        if "lmod" not in opt:
            labs[j] = LB + r if opt.get("labels") == "pos" else LB + MI + slots[j]
        seg = [labs[j]] + item(cands[j])
        start = len(toks)
        toks += seg
        if opt.get("pos", "shared") == "true":
            pos += list(range(start, start + len(seg)))
        else:
            pos += list(range(len(lead) + len(hdr), len(lead) + len(hdr) + len(seg)))
        block += [r] * len(seg)
    nb = len(toks)
    for j in spill:
        toks += [labs[j]] + item(cands[j])
    link = int(opt.get("link", "0"))
    if link:
        for r, j in enumerate(hot):
            seg = ([labs[j]] + item(cands[j]))[:link]
            toks += seg
    if "after" in opt:  # re-send the chosen tokens (label|id) of every item after the block
        for r, j in enumerate(hot):
            seg = [labs[j]] + item(cands[j])
            toks += [seg[0]] if opt["after"] == "label" else seg[1:]
    toks += instr if lead else prof + instr
    n = len(toks)
    pos += list(range(nb, n))
    block += [-2] * (n - nb)
    b = torch.tensor(block)
    allowed = torch.ones(n, n).tril().bool()
    pooled_rows = b >= 0
    same = b[:, None] == b[None, :]
    hdr_cols = (b == -1)[None, :].expand(n, n)
    allowed[pooled_rows] &= (same | hdr_cols)[pooled_rows]
    recompute = torch.zeros(n, dtype=torch.bool)
    if "sel" in opt:
        idx = [i for i in range(len(lead) + len(hdr), nb) if (opt["sel"] == "label") == (toks[i] < IDB)]
        recompute[idx] = True
    if "blend" in opt:
        recompute |= pick_blend(toks, pos, allowed, float(opt["blend"]), nb, len(lead) + len(hdr))
    if recompute.any():
        full = torch.ones(n, n).tril().bool()
        allowed[recompute] = full[recompute]
        if opt.get("rpos", "true") == "true":
            for i in recompute.nonzero().flatten().tolist():
                pos[i] = i
    return toks, pos, allowed, labs


def layer0_k(tokens, pos, allowed):
    """K of layer 1 (input of layer index 1) per token: a proxy for CacheBlend's deviation."""
    n = len(tokens)
    mask = torch.zeros(1, 1, n, n)
    mask[0, 0][~allowed] = torch.finfo(torch.float32).min
    with torch.no_grad():
        out = model.model(input_ids=torch.tensor([tokens]), position_ids=torch.tensor([pos]),
                          attention_mask=mask, output_hidden_states=True)
    h = out.hidden_states[2][0]  # after layers 0 and 1
    return h


def pick_blend(tokens, pos, allowed, ratio, nb, h0):
    n = len(tokens)
    full = torch.ones(n, n).tril().bool()
    true_pos = list(range(n))
    a = layer0_k(tokens, pos, allowed)
    b = layer0_k(tokens, true_pos, full)
    dev = (a - b).norm(dim=-1)
    dev[:h0] = -1
    dev[nb:] = -1
    m = int(round(ratio * (nb - h0)))
    out = torch.zeros(n, dtype=torch.bool)
    if m:
        out[dev.topk(m).indices] = True
    return out


def main():
    res = {v: [] for v in VARIANTS}
    t0 = time.time()
    for seed in SEEDS:
        rng = random.Random(seed)
        for ui, (uid, h) in enumerate(users):
            target, hist = h[-1], h[:-1]
            prof = [t for i in hist[-20:] for t in item(i)]
            cands = D.candidates(rng, [target], 100)
            rng.shuffle(cands)
            hot = sorted(range(100), key=lambda j: (-D.count[cands[j]], cands[j]))
            slots = rng.sample(range(12288), 100)
            ti = cands.index(target)
            for v in VARIANTS:
                toks, pos, allowed, labs = build(v, prof, cands, hot, slots)
                if ":readout=item" in v:  # score each candidate by its own id token's logit
                    labs = [item(c)[0] for c in cands]
                sc = run(toks, pos, allowed, labs)
                rank = int((sc > sc[ti]).sum())
                res[v].append((seed, uid, rank, sc.topk(10).indices.tolist(), sc))
        print(f"seed {seed} done {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    out = {}
    for v, rows in res.items():
        per = {}
        for seed, uid, rank, _, _ in rows:
            per.setdefault(seed, []).append(rank)
        r10 = [sum(r < 10 for r in rs) / len(rs) for rs in per.values()]
        nd = [sum(1 / math.log2(r + 2) for r in rs if r < 10) / len(rs) for rs in per.values()]
        out[v] = dict(recall10=[round(x, 4) for x in r10], ndcg10=[round(x, 4) for x in nd],
                      r10_mean=round(sum(r10) / len(r10), 4), nd_mean=round(sum(nd) / len(nd), 4))
    base = res.get("up")
    if base:
        for v, rows in res.items():
            d = [(a[2] < 10) - (b[2] < 10) for a, b in zip(rows, base)]
            m = sum(d) / len(d)
            sd = (sum((x - m) ** 2 for x in d) / (len(d) - 1)) ** 0.5 / len(d) ** 0.5
            out[v]["d_r10_vs_up"] = round(m, 4)
            out[v]["se"] = round(sd, 4)
            ov = [len(set(a[3]) & set(b[3])) / 10 for a, b in zip(rows, base)]
            out[v]["top10_overlap_vs_up"] = round(sum(ov) / len(ov), 4)
            sp = []
            for a, b in zip(rows, base):
                ra = a[4].argsort().argsort().float(); rb = b[4].argsort().argsort().float()
                sp.append(float(torch.corrcoef(torch.stack([ra, rb]))[0, 1]))
            out[v]["spearman_vs_up"] = round(sum(sp) / len(sp), 4)
    print(json.dumps(dict(split=SPLIT, users=len(users), seeds=SEEDS, ckpt=CK, variants=out), indent=1))


main()
