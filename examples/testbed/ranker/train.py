"""Training of the GR ranker (see train_ranker.py for the recipe and the checkpoint).

Owns the model, the teacher, the hp (HP: the recipe) and the Trainer the loops share: one
model (an HF Qwen2ForCausalLM trained through model.py's forward), a teacher fitted on the
training users (teacher.py), the batch sampler (batches.py) and the dev metric.

The recipe (VERSION 3, hp `plain` 1) trains in plain.py: an ordinary init, items as their own
id tokens, a loss per part of the circuit, then a second stage for the copy to the labels.

The code below `Trainer.run`'s `plain` branch is recipe VERSION 2 (hp `base` 2, HP_V2; at
chance, docs/history.md), kept for the device experiments written against it:
1. Encoders (cheap: a title alone is 19 tokens): one layer before the last, a candidate's
   last token (`[label, title]` alone from position 0: the pooled layout) must carry its
   title's teacher vector and name its label (through the tied unembedding), and the final
   token of a bare profile + instruction must carry the user's teacher query. Linear probes
   read the vectors; they exist only in training.
2. Ranking in recache's layouts (batches.py): cross-entropy of the held-out item's label at
   the final token, distillation towards the teacher's ranking of the same candidates, and
   the stage-1 losses at every candidate and final token whatever the layout, so the
   representations the last layer compares stay the same in UP, IP and pooled prompts.
   The copy of a label into its item and from the preferred item to the output is built into
   the weights (`weights.py`: a frozen positional head in layer 0, a readout head in the last
   layer); training has to learn the comparison (which item the user prefers).
"""
import math, random, time

import torch
import torch.nn.functional as F

from . import batches, layout, model as fwd, teacher as teach
from .weights import label_channel, item_channel

# The recipe's hp (HP, HP_V2, EXTRA, recipe_hp) live in hp.py; train.HP etc. stay the names
# callers use.
from .hp import EXTRA, HP, HP_V2, recipe_hp  # noqa: F401


def config(hp, tok):
    from transformers import Qwen2Config
    return Qwen2Config(vocab_size=len(tok), hidden_size=hp["hidden"],
                       intermediate_size=hp["ffn"], num_hidden_layers=hp["layers"],
                       num_attention_heads=hp["heads"], num_key_value_heads=hp["kv_heads"],
                       max_position_embeddings=16384, rope_theta=10000.0,
                       tie_word_embeddings=True, bos_token_id=tok.pad_token_id,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def to_teacher(scores, teacher, mask=None):
    """KL(teacher || model) over a prompt's candidates, both as softmaxes of their scores;
    with `mask` ([B], 0 or 1), the mean over the rows it keeps."""
    if mask is None:
        return F.kl_div(F.log_softmax(scores, 1), F.log_softmax(teacher, 1), log_target=True,
                        reduction="batchmean")
    kl = F.kl_div(F.log_softmax(scores, 1), F.log_softmax(teacher, 1), log_target=True,
                  reduction="none").sum(1)
    return (kl * mask).sum() / mask.sum().clamp(min=1.0)


class Trainer:
    def __init__(self, data, tok, hp, log=print, device="cpu"):
        torch.set_num_threads(1)
        torch.manual_seed(hp["seed"])
        from transformers import Qwen2ForCausalLM
        hp = {**EXTRA, **hp}
        self.hp, self.log, self.data = hp, log, data
        self.model = Qwen2ForCausalLM(config(hp, tok))
        used = hp["label_base"] + layout.MAX_ITEMS + hp["pool_slots"]
        if hp["item_ids"]:
            if hp["item_ids"] < used:
                raise SystemExit(f"[ranker] item_ids {hp['item_ids']} overlaps the label "
                                 f"ranges (below {used})")
            used = hp["item_ids"] + max(data.count) + 1
            if used > len(tok):
                raise SystemExit(f"[ranker] item_ids {hp['item_ids']}: item ids reach {used}, "
                                 f"past the vocabulary's {len(tok)}")
        self.used = used
        titles = [tok(t, add_special_tokens=False)["input_ids"] for t in data.titles]
        instruction = tok(layout.DEFAULT_INSTRUCTION, add_special_tokens=False)["input_ids"]
        text_ids = sorted({i for t in titles for i in layout.fit(t, hp["item_tokens"])} |
                          set(instruction))
        lc = {**hp, "text_ids": text_ids}
        masks = {} if hp["plain"] else label_channel(self.model, lc, used)
        self.it = (item_channel(self.model, {**hp, "end_seen": lc.get("end_seen")}, masks)
                   if hp["item_dims"] else None)
        self.s = batches.Sampler(data, hp["item_tokens"], titles, hp["history_items"],
                                 hp["pool_slots"], hp["seed"])
        self.s.instruction = instruction
        self.s.label_base = hp["label_base"]
        self.s.id_base = hp["item_ids"]
        self.s.pool_full = hp.get("pool_full", 0.3)
        fwd.POOLED_POS = hp.get("pool_pos", "shared")
        t0 = time.time()
        self.teacher = teach.Teacher(data, hp["rank"], hp["history_items"])
        self.vecs = self.teacher.item_vectors(hp["probe_dims"])
        hists = [self.s.data.users[u][1][:t] for u, t in
                 (self.s.events[i] for i in range(0, len(self.s.events), 50))]
        self.user_mean, self.user_std = self.teacher.user_scale(hists, hp["probe_dims"])
        # Titles are learnt in proportion to the square root of how often they are drawn as
        # candidates: the popular ones are most of every candidate list.
        drawn = torch.zeros(len(data.titles), dtype=torch.float64)
        for i, c in zip(data.items, data.item_counts):
            drawn[data.title_of(i)] += c
        self.title_weight = drawn.sqrt() + 1.0
        log(f"[ranker] teacher fitted in {time.time() - t0:.0f}s")
        self.probe = torch.nn.Linear(hp["item_dims"] or hp["hidden"], self.vecs.shape[1])
        self.user_probe = torch.nn.Linear(hp["hidden"], self.user_mean.shape[0])
        if hp.get("item_init"):
            self.init_item_rows(hp["item_init"])
        # Training touches token ids below `used` only (text tokens, both label ranges): train
        # those rows as their own table, so the optimizer does not sweep all 65,536 each step.
        self.full = self.model.model.embed_tokens
        self.model.model.embed_tokens = torch.nn.Embedding.from_pretrained(
            self.full.weight.detach()[:used].clone(), freeze=False)
        if not hp["plain"]:
            masks[self.model.model.embed_tokens.weight] = masks.pop(self.full.weight)[:used]
        self.masks = masks
        params = [p for p in self.model.parameters() if p is not self.full.weight]
        self.opt = torch.optim.AdamW(params + list(self.probe.parameters()) +
                                     list(self.user_probe.parameters()),
                                     lr=hp["lr"], betas=(0.9, 0.98), weight_decay=0.0)
        self.dev = [self.s.user(h[:-1], h[-1]) for (_, h), sp in zip(data.users, data.split)
                    if sp == "dev"][:hp.get("dev_users", 200)]
        self.steps_run = {}
        # plain: stays on the CPU until plain.run has forked its batch workers (no CUDA in them)
        self.target_device = device
        self.to("cpu" if hp["plain"] else device)

    def init_item_rows(self, gain):
        """hp `item_init` (with `item_ids`): each item token's embedding row starts from the
        teacher's factors of the item's title (its E row and prior, fitted on training users'
        interactions alone), standardized and scaled to `gain` x the init's std, in its first
        `rank` + 1 dims: a collaborative item embedding to start from, as GR models start
        from pretrained item vectors. The other dims keep their random init."""
        hp, data = self.hp, self.data
        e = torch.cat([self.teacher.e, self.teacher.prior[:, None]], 1)
        e = (e - e.mean(0)) / (e.std(0) + 1e-6)
        std = self.model.config.initializer_range
        w = self.model.model.embed_tokens.weight
        ids = torch.tensor(sorted(data.count))
        with torch.no_grad():
            w[hp["item_ids"] + ids, :e.shape[1]] = gain * std * e[[data.title_of(int(i))
                                                                   for i in ids]]

    def to(self, device):
        """Moves what training computes with to `device` and makes it torch's default there
        (the batches and the forward build their index tensors on the default device). Built on
        the CPU first either way, so the initial weights are the CPU recipe's for a seed."""
        device = torch.device(device)
        torch.set_default_device(device)
        self.device = device
        # In place: the optimizer's and the masks' keys stay valid; `self.full` is tied to the
        # LM head, so it moves with the model. Called once, before the optimizer has state.
        self.model.to(device)
        self.probe.to(device)
        self.user_probe.to(device)
        self.masks = {p: m.to(device) for p, m in self.masks.items()}
        t = self.teacher
        t.e, t.prior = t.e.to(device), t.prior.to(device)
        self.vecs = self.vecs.to(device)
        self.user_mean, self.user_std = self.user_mean.to(device), self.user_std.to(device)

    def taps(self):
        """Where the probes read: titles after `title_tap` layers, labels and the user's query
        at the input of the last layer (what the last layer compares and copies)."""
        return (self.hp["title_tap"], self.hp["layers"] - 1)

    def title_loss(self, states, titles):
        return self.hp["probe"] * F.mse_loss(self.probe(states), self.vecs[titles])

    def label_loss(self, states, labels):
        """Row i of `states` (a candidate's last token) must name labels[i] among `labels`."""
        scores = fwd.label_scores(self.model, states[None], labels[None])[0]
        return self.hp["aux"] * F.cross_entropy(scores, torch.arange(len(labels)))

    def user_loss(self, states, hists):
        dims = self.user_mean.shape[0]
        want = torch.stack([(self.teacher.user_vector(h)[:dims] - self.user_mean) / self.user_std
                            for h in hists])
        return self.hp["probe"] * F.mse_loss(self.user_probe(states), want)

    def profile_loss(self, tap, b):
        """History titles' last tokens in the users' rows carry their title vectors."""
        rows = [r for r, e in enumerate(b["hist_ends"]) for _ in e]
        cols = [c for e in b["hist_ends"] for c in e]
        return self.title_loss(tap[rows, cols], [t for ts in b["hist_titles"] for t in ts])

    def encoder_loss(self):
        """Stage 1: candidates alone from position 0, and bare profiles + instruction."""
        s, hp, rng = self.s, self.hp, self.s.rng
        t1, t2 = self.taps()
        ts = s.np.choice(len(self.data.titles), hp["enc_titles"], replace=False,
                         p=(self.title_weight / self.title_weight.sum()).numpy()).tolist()
        labels = rng.sample(range(hp["label_base"], hp["label_base"] + layout.MAX_ITEMS +
                                  hp["pool_slots"]), len(ts))
        ids = torch.tensor([[l] + layout.fit(s.title_tokens[t], s.n_tok)
                            for l, t in zip(labels, ts)])
        pos = torch.arange(ids.shape[1]).expand_as(ids)
        if self.it is not None:  # the item channel: learnt on items alone, the same anywhere;
            # complete after layer 0 (no later layer writes there)
            _, _, tap = fwd.run_part(self.model, ids, pos, tap=(1,),
                                     depth=1)
            return self.hp["item_probe"] * self.title_loss(tap[1][:, -1, self.it], ts)
        _, _, tap = fwd.run_part(self.model, ids, pos, tap=(t1, t2))
        loss = self.title_loss(tap[t1][:, -1], ts) + self.label_loss(tap[t2][:, -1],
                                                                    torch.tensor(labels))
        us = s.users(hp["enc_users"])
        rows = s._suffixes(us, 0)
        last = [len(u["profile"]) + len(s.instruction) - 1 for u in us]
        pos = torch.arange(rows["users"].shape[1]).expand_as(rows["users"])
        _, _, tap = fwd.run_part(self.model, rows["users"], pos, tap=(t1, t2))
        return (loss + self.profile_loss(tap[t1], rows) +
                self.user_loss(tap[t2][torch.arange(len(us)), last], rows["hists"]))

    def rank_loss(self, b):
        """Stage 2: one batch in a layout; returns (loss, final scores, main CE)."""
        hp = self.hp
        t1, t2 = self.taps()
        out = fwd.forward_group(self.model, b, tap=(t1, t2))
        final = fwd.label_scores(self.model, out["users"][:, -1:], b["labels"])[:, 0]
        main = F.cross_entropy(final, b["target"])
        t = torch.stack([self.teacher.scores(h, c) for h, c in zip(b["hists"], b["candidates"])])
        t = t / (t.std(1, keepdim=True) + 1e-6) / hp["kd_temp"]
        kd = to_teacher(final, t)
        if hp["plain"]:
            self.parts = dict(kd=kd.item())
            return main + hp["kd"] * kd, final, main.item()
        rows = torch.arange(b["users"].shape[0])
        ut = out["users_tap"]
        if self.it is not None:
            return self.channel_loss(b, out, final, main, kd, t)
        aux = self.user_loss(ut[t2][rows, b["last"][:, -1]], b["hists"])
        aux = aux + self.profile_loss(ut[t1], b)
        if b["pooled"] is None and b["tail"] is None:  # user-first: item ends are in the rows
            for r in range(len(rows)):
                ends = b["last"][r, :-1]
                aux = aux + (self.title_loss(ut[t1][r, ends], b["cand_titles"][r]) +
                             self.label_loss(ut[t2][r, ends], b["labels"][r])) / len(rows)
        else:
            parts = []
            if "pooled" in out:
                parts.append((out["pooled_tap"][t1][:, -1], out["pooled_tap"][t2][:, -1]))
            if "tail" in out:
                e = b["tail_ends"]
                parts.append((out["tail_tap"][t1][0, e], out["tail_tap"][t2][0, e]))
            aux = aux + self.title_loss(torch.cat([p[0] for p in parts]), b["item_titles"])
            aux = aux + self.label_loss(torch.cat([p[1] for p in parts]), b["labels"][0])
        loss = main + hp["kd"] * kd + aux
        self.parts = dict(kd=kd.item(), aux=aux.item())
        if hp.get("att", 0):
            # The readout's own choice among the item ends: the held-out item (CE) and the
            # teacher's ranking (KD), so its query/key learn the comparison directly rather
            # than only through the label copy (off in the CPU recipe: not in HP, not stamped).
            logits = fwd.readout_logits(self.model, b, out, ut[t2])
            att = F.cross_entropy(logits, b["target"]) + to_teacher(logits, t)
            loss = loss + hp["att"] * att
            self.parts["att"] = att.item()
        return loss, final, main.item()

    def seed_readout(self):
        """Between the stages: the readout's first score row starts as what the item probe
        learnt to read as the title's prior (the teacher's strongest single signal), at the
        item ends' typical RMS, so stage 2 starts from a ranking rather than from noise."""
        hp = self.hp
        a = self.model.model.layers[-1].self_attn
        d = a.head_dim
        row = (hp["heads"] - 1) * d + d // 2 - 2
        rng = self.s.rng.getstate(), self.s.np.bit_generator.state
        with torch.no_grad():
            b = self.s.group("ip", self.s.users(2), hp["candidates"])
            out = fwd.forward_group(self.model, b, tap=(hp["layers"] - 1,))
            x = out["tail_tap"][hp["layers"] - 1][0, b["tail_ends"]]
            rms = x.pow(2).mean(-1).sqrt().mean()
            g = self.model.model.layers[-1].input_layernorm.weight[self.it]
            w = self.probe.weight[0] * rms / g
            # What turns a probe row into a key row (fix_score seeds more rows with it).
            self.seed_scale = hp["seed_gain"] * rms / g / (hp["score_gain"] * a.scaling)
            a.k_proj.weight[row] = 0
            a.k_proj.weight[row, self.it] = hp["seed_gain"] * w / (hp["score_gain"] * a.scaling)
            rows = [row - j for j in range(1, hp["score_pairs"])]
            a.q_proj.bias[rows] = 0
        self.s.rng.setstate(rng[0])
        self.s.np.bit_generator.state = rng[1]

    def fix_score(self):
        """Stage 2 keeps the seeded comparison (issue 21, 2026-11-26 fifth session: trained
        freely, the readout's own ranking fell from its seed to chance). hp `score_fix`:
        1 = the seeded prior row (its key row, its query bias and query weights) frozen, the
        other score rows learnt on top (a fixed bias plus a learnt residual); 2 = every score
        key row frozen at the seed, rows after the first seeded from the item probe's next
        rows (the teacher's E[:, j]), so only the user's query weights on them are learnt.
        hp `enc_frozen` 1: layer 0 and the embeddings frozen in stage 2 too (the item channel
        the keys read stays what stage 1 made it). Frozen parameters lose their optimizer
        state, so stage 1's momentum does not move them either."""
        hp = self.hp
        if not hp["score_fix"] and not hp["enc_frozen"]:
            return
        a = self.model.model.layers[-1].self_attn
        d = a.head_dim
        row = (hp["heads"] - 1) * d + d // 2 - 2
        rows = [row - j for j in range(hp["score_pairs"])]
        frozen = []

        def freeze(p, idx=None):
            m = self.masks.setdefault(p, torch.ones_like(p))
            if idx is None:
                m.zero_()
            else:
                m[idx] = 0
            frozen.append(p)

        if hp["score_fix"]:
            # The readout's input norm weight on the item channel too (the keys' scale).
            freeze(self.model.model.layers[-1].input_layernorm.weight, self.it)
            freeze(a.k_proj.weight, [row])
            freeze(a.q_proj.bias, [row])
            freeze(a.q_proj.weight, [row])
        if hp["score_fix"] == 2:
            with torch.no_grad():
                for j, r in enumerate(rows[1:], 1):
                    a.k_proj.weight[r] = 0
                    a.k_proj.weight[r, self.it] = self.seed_scale * self.probe.weight[j]
                    a.q_proj.bias[r] = 0
                    a.q_proj.weight[r] = 0
            freeze(a.k_proj.weight, rows)
            freeze(a.q_proj.bias, rows)
        if hp["enc_frozen"]:
            freeze(self.model.model.embed_tokens.weight)
            for p in self.model.model.layers[0].parameters():
                freeze(p)
        for p in frozen:
            self.opt.state.pop(p, None)

    def channel_loss(self, b, out, final, main, kd, t):
        """Stage 2 with the item channel: the main CE and distillation, the readout's own
        choice among the item ends (CE towards the held-out item, KL towards the teacher), and
        the item probe at every item end (the channel holds the same there as alone)."""
        hp = self.hp
        t1, t2 = self.taps()
        ut = out["users_tap"]
        if b["pooled"] is None and b["tail"] is None:
            rows = torch.arange(b["users"].shape[0])
            states = torch.stack([ut[t2][r, b["last"][r, :-1]] for r in rows])
            probe = self.title_loss(states[..., self.it].flatten(0, 1),
                                    [x for c in b["cand_titles"] for x in c])
        else:
            parts = []
            if "pooled" in out:
                parts.append(out["pooled_tap"][t2][:, -1])
            if "tail" in out:
                parts.append(out["tail_tap"][t2][0, b["tail_ends"]])
            probe = self.title_loss(torch.cat(parts)[:, self.it], b["item_titles"])
        # read_temp > 1: the readout's own loss sees its logits / read_temp, so the weak
        # comparison is calibrated there while the attention itself stays read_temp x sharper
        # (a near-uniform attention averages 100 label codes into noise).
        logits = fwd.readout_logits(self.model, b, out, ut[t2]) / hp["read_temp"]
        att = hp["att_ce"] * F.cross_entropy(logits, b["target"]) + to_teacher(logits, t)
        # main_ce 0 (with kd 0): the label logits are not trained on at all, the readout's
        # attention only by its own loss (else the label CE flattens it: the copy is noise).
        loss = (hp["main_ce"] * main + hp["kd"] * kd + hp["item_probe"] * probe +
                hp.get("att", 1.0) * att)
        self.parts = dict(kd=kd.item(), probe=probe.item(), att=att.item())
        return loss, final, main.item()

    def lr(self, step, total, peak, done=None, warmup=None):
        """Warm-up by steps (`warmup`, or hp's), then a cosine to 0.1x over step / total (or
        `done`, the share of a run on time that has passed: plain.py's curriculum)."""
        warm = min(1.0, (step + 1) / (warmup or self.hp["warmup"]))
        done = step / total if done is None else done
        return peak * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))

    def step(self, loss, lr):
        for g in self.opt.param_groups:
            g["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        for p, m in self.masks.items():
            if p.grad is not None:
                p.grad.mul_(m)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()

    def dev_metrics(self, layouts=("up", "pool", "ip"), teacher=False):
        """Recall@10 / NDCG@10 on dev users' last items (100 candidates), per layout."""
        out = {}
        state = self.s.rng.getstate(), self.s.np.bit_generator.state
        with torch.no_grad():
            for kind in layouts:
                self.s.rng.seed(12345)
                hits = ndcg = 0.0
                for u in self.dev:
                    b = self.s.up([u], 100) if kind == "up" else self.s.group(kind, [u], 100)
                    if teacher:
                        sc = self.teacher.scores(u["history"], b["candidates"][0])[None]
                    else:
                        sc = self.rank_loss(b)[1]
                    rank = int((sc[0] > sc[0, b["target"][0]]).sum())
                    hits += rank < 10
                    ndcg += 1 / math.log2(rank + 2) if rank < 10 else 0.0
                out[kind] = (round(hits / len(self.dev), 4), round(ndcg / len(self.dev), 4))
                if teacher:
                    break
        self.s.rng.setstate(state[0])
        self.s.np.bit_generator.state = state[1]
        return out

    def planned(self, stage, step, total, t_stage):
        """Steps of a stage: `total`, or with `budget_s` set (device runs) as many as fit in
        the stage's share of it at the rate of its first 20 steps, never more than `total`.
        Fixed once, at step 20, so the learning-rate schedule still runs its whole course."""
        budget = self.hp.get("budget_s", 0)
        if not budget or step != 20 or stage in self.steps_run:
            return self.steps_run.get(stage, total)
        enc = self.hp.get("enc_share", 0.3)
        share = enc if stage == "encoder" else 1.0 - enc
        rate = (time.time() - t_stage) / 20
        fit = max(21, int(budget * share / rate))
        self.steps_run[stage] = min(total, fit)
        self.log(f"[ranker] {stage}: {rate * 1000:.0f} ms/step, budget {budget * share:.0f}s: "
                 f"{self.steps_run[stage]} steps")
        return self.steps_run[stage]

    def run(self):
        if self.hp["plain"]:
            from . import plain
            return plain.run(self)
        hp, log = self.hp, self.log
        t0, avg = time.time(), None
        total, step = hp["enc_steps"], 0
        while step < total:
            loss = self.encoder_loss()
            self.step(loss, self.lr(step, total, hp["enc_lr"]))
            avg = loss.item() if avg is None else 0.98 * avg + 0.02 * loss.item()
            if (step + 1) % 100 == 0:
                log(f"[ranker] encoder step {step + 1}/{total} loss {avg:.3f} "
                    f"{time.time() - t0:.0f}s")
            step += 1
            total = self.planned("encoder", step, total, t0)
        self.steps_run.setdefault("encoder", total)
        if self.it is not None:
            self.seed_readout()
            self.fix_score()
        kinds = []
        for part in hp["mix"].split(","):
            name, weight = part.split(":")
            kinds += [name] * int(weight)
        order = random.Random(hp["seed"] + 1)
        avg, total, step, t1 = None, hp["steps"], 0, time.time()
        while step < total:
            kind = order.choice(kinds)
            if kind == "up":
                b = self.s.up(self.s.users(hp["up_users"]), hp["candidates"])
            else:
                b = self.s.group(kind, self.s.users(hp["group_users"]), hp["candidates"])
            loss, _, main = self.rank_loss(b)
            self.step(loss, self.lr(step, total, hp["lr"]))
            avg = main if avg is None else 0.98 * avg + 0.02 * main
            if (step + 1) % 50 == 0:
                parts = " ".join(f"{k} {v:.3f}" for k, v in self.parts.items())
                log(f"[ranker] rank step {step + 1}/{total} ce {avg:.3f} ({parts}) "
                    f"{time.time() - t0:.0f}s")
            if hp.get("dev_every") and (step + 1) % hp["dev_every"] == 0:
                log(f"[ranker] dev recall@10/ndcg@10 {self.dev_metrics()}")
            step += 1
            total = self.planned("rank", step, total, t1)
        self.steps_run.setdefault("rank", total)
        log(f"[ranker] trained in {time.time() - t0:.0f}s")
        return self.finish()

    def finish(self):
        """The trained rows back into the full (tied) embedding."""
        compact = self.model.model.embed_tokens.weight.detach()
        with torch.no_grad():
            self.full.weight[:compact.shape[0]] = compact
        self.model.model.embed_tokens = self.full
        assert self.model.lm_head.weight is self.full.weight
        return self.model
