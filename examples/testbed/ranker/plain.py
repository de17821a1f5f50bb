"""Training of the GR ranker's recipe (hp `plain` 1, recipe VERSION 3; docs/quality.md): an
ordinary Qwen2 init (no hand-built channels or flags) trained end to end on recache's layouts
(batches.py: UP, IP, pooled, pooled after the user) with the label CE at the final token, distillation towards the
teacher over the prompt's candidates and the auxiliary losses below; then, with hp `then`, a
second stage from where the first ended (its hp overrides: which weights train, the losses,
the steps) on the same stream of batches.

Owns the fast loop (`Feed`, `stage`). Batches (batches.py's, with the teacher's normalized
scores attached and `last` cut to the final token) are built by CPU worker processes forked
before the model moves to the GPU, streamed in order. On a step count (the CPU recipe) each
step waits for its batch, so a seed gives the same weights; with hp `budget_s` (device runs)
a step that finds no new batch draws a kept one again, so the GPU never waits, and the step
count is fixed once from the measured step time, so the cosine schedule runs its whole
course. bf16 autocast on CUDA.

Label rows (hp `label_frozen`, `label_gain`; docs/quality.md, How the ranker is made): every label
row, positional and pool slot, keeps its random init scaled by `label_gain`, so the copy
learnt on the positional labels (in every prompt) reads the pool slots' (a few times each in
a run) alike.

hp `curriculum` "K1:N1,K2:N2,...": the first N1 batches hold K1 candidates, the next N2 K2, the
rest `candidates` (a pointer over 100 candidates never formed from the start: docs/history.md,
Ranking quality; with few candidates the right one carries a larger share of the gradient). Steps
then differ in cost, so the schedule runs on time instead: the cosine follows elapsed/budget_s
and training stops at the budget. Train recall is reported as the top-10% hit rate at the
batch's K (Recall@10 at 100).

Checks of the pointer alone (docs/history.md, Ranking quality): hp `copy_task` p (the
target's title repeats as the profile's last; `copy_until`/`copy_fade` fade it into the real
task) and `label_hint` (the target's label as the instruction's first token).

With items as their own id tokens (hp `item_ids`; docs/quality.md, How the ranker is made), each a
weight on a loss of its own, logged apart: `aux_item` (the final token's CE over every item's
id token: what the user takes next), `aux_seq` (the same at every profile token: the item
after it), `aux_label` (each candidate's last token names its own label at the last layer's
input: the copy the readout reads) and `aux_point` (the last layer's last head at the final
token, its attention logits over the candidates: CE to the target and KL to the teacher).
`readout_init` starts that head as the pointer (`init_readout`).
"""
import multiprocessing as mp
import os, random, threading, time

import numpy as np
import torch
import torch.nn.functional as F

from . import layout, model as fwd
from .train import to_teacher

_T = None  # the trainer, inherited by the forked workers (its CPU state only)
KEYS = ("lead", "pooled", "tail", "tail_start", "user_start", "users", "last", "labels", "target",
        "teacher", "kd_mask", "tail_ends", "item_ends", "target_item", "seq_next")


def _worker_init():
    os.nice(5)  # the training process keeps its core for kernel launches
    torch.set_num_threads(1)
    torch.set_default_device("cpu")


def candidates_at(hp, i):
    """Candidates in batch i under hp `curriculum` (none: `candidates`)."""
    at = 0
    for part in filter(None, str(hp.get("curriculum") or "").split(",")):
        k, n = (int(x) for x in part.split(":"))
        at += n
        if i < at:
            return k
    return hp["candidates"]


def make_batch(i):
    """Batch i of the run: its layout and users drawn from seeds of (seed, i) alone."""
    t = _T
    hp, s = t.hp, t.s
    k = candidates_at(hp, i)
    s.rng.seed(hp["seed"] * 1_000_003 + i)
    s.np = np.random.default_rng([hp["seed"], i])
    kinds = [name for part in hp["mix"].split(",") for name in
             [part.split(":")[0]] * int(part.split(":")[1])]
    kind = random.Random(i).choice(kinds)
    # hp copy_task p (a check of the pointer alone): with probability p a user's most recent
    # profile title is replaced by its target's, so the answer is the candidate whose title
    # repeats the profile's last one. hp copy_until N, copy_fade M: p holds for batches < N,
    # then falls linearly to 0 over the next M (the copy task fading into the real task).
    p = hp.get("copy_task", 0.0)
    if hp.get("copy_fade") and i >= hp.get("copy_until", 0):
        p *= max(0.0, 1.0 - (i - hp.get("copy_until", 0)) / hp["copy_fade"])
    copied = []

    us_all = []

    def users(n):
        us = s.users(n)
        us_all.extend(us)
        for u in us:
            copied.append(s.rng.random() < p)
            if copied[-1]:
                u["profile"] = u["profile"][:-s.n_tok] + s.item(u["target"])
        return us

    if kind == "up":
        b = s.up(users(hp["up_users"]), k)
    elif kind == "aup":  # one row per user, like `up` (hp `aup_users`, default `up_users`)
        b = s.after_user(users(hp.get("aup_users") or hp["up_users"]), k)
    else:
        # a group's candidates hold its users' targets: keep their share as at `candidates`
        n_users = max(1, min(hp["group_users"], hp["group_users"] * k // hp["candidates"]))
        b = s.group(kind, users(n_users), k)
    if hp.get("label_hint"):  # pipeline sanity check: the instruction's first token is the
        # target's label, so the answer is a copy from a fixed offset before the final token
        at = b["last"][:, -1] - len(s.instruction) + 1
        rows = torch.arange(len(at))
        b["users"][rows, at] = b["labels"][rows, b["target"]]
    sc = torch.stack([t.teacher.scores(h, c) for h, c in zip(b["hists"], b["candidates"])])
    b["teacher"] = sc / (sc.std(1, keepdim=True) + 1e-6) / hp["kd_temp"]
    # the teacher scores the real task: no distillation on a copied user
    b["kd_mask"] = torch.tensor([0.0 if c else 1.0 for c in copied])
    # hp aux_label: user-first rows' item ends, in label order (group batches: tail_ends)
    b["item_ends"] = b["last"][:, :-1].contiguous() if kind == "up" else torch.zeros(0)
    b.setdefault("tail_ends", torch.zeros(0, dtype=torch.long))
    b.setdefault("lead", None)
    b["last"] = b["last"][:, -1:].contiguous()  # the loss reads the final token only
    b["target_item"] = torch.tensor([c[t] for c, t in zip(b["candidates"], b["target"].tolist())])
    if hp.get("aux_seq") and kind != "aup":  # (aup's profile is in `lead`: not read)
        # hp aux_seq (item tokens, item_tokens 1): every profile token also predicts the item
        # after it (the last one: the target), a sequential recommender's loss at each step.
        # A batch's users share one profile length, and the profile leads every row.
        if s.n_tok != 1:
            raise SystemExit("[plain] aux_seq needs item_ids with item_tokens 1")
        n = len(us_all[0]["profile"])
        b["seq_next"] = torch.tensor([(u["history"][-n:] + [u["target"]])[1:] for u in us_all])
        b["last"] = torch.cat([torch.arange(n).expand(len(us_all), n), b["last"]], 1)
    else:
        b["seq_next"] = torch.zeros(0, dtype=torch.long)
    # As numpy: torch tensors would cross the process boundary as shared-memory handles,
    # one open file per kept tensor.
    return kind, {k: b[k].numpy() if torch.is_tensor(b[k]) else b[k] for k in KEYS}


def to_device(b, device):
    return {k: torch.from_numpy(v).to(device, non_blocking=True) if isinstance(v, np.ndarray)
            else v for k, v in b.items()}


def item_label_logits(model, b, out, tap):
    """hp aux_label: the residual at the last layer's input at every candidate's last token,
    read through the final norm and the tied label rows: [R, K, K] (R = 1 for a group, whose
    items all users share), each item's row over the prompt's labels in label order."""
    # user-first: the items are in the rows
    if b["pooled"] is None and b["tail"] is None and b.get("lead") is None:
        x = out["users_tap"][tap]
        rows = torch.arange(x.shape[0])[:, None]
        return fwd.label_scores(model, x[rows, b["item_ends"]], b["labels"])
    parts = []
    if b["pooled"] is not None:
        parts.append(out["pooled_tap"][tap][:, -1])
    if b["lead"] is not None:  # aup: the other items, in the first row (alike in every row
        parts.append(out["users_tap"][tap][0, b["tail_ends"]])  # but for what they see)
    if b["tail"] is not None:
        parts.append(out["tail_tap"][tap][0, b["tail_ends"]])
    return fwd.label_scores(model, torch.cat(parts)[None], b["labels"][:1])


def point_logits(model, b, out, tap):
    """hp aux_point: the last layer's last head at each user's final token, its attention
    logits over the candidates' last tokens in label order, [B, K]: model.readout_logits,
    whose user-first rows read the item ends from `last` (plain batches keep them apart)."""
    view = dict(b)
    if b["pooled"] is None and b["tail"] is None and b.get("lead") is None:
        view["last"] = torch.cat([b["item_ends"], b["last"][:, -1:]], 1)
    return fwd.readout_logits(model, view, out, out["users_tap"][tap])


def item_logits(model, hidden, base):
    """Logits over every item's id token (row `base` + id of the tied embedding) from hidden
    states before the final norm: the next-item losses `aux_item` and `aux_seq`."""
    return model.model.norm(hidden) @ model.model.embed_tokens.weight[base:].T


def loss_of(model, b, hp, amp):
    """Label CE at the final token + KD towards the teacher, plus the auxiliary losses of the
    module doc (`aux_item`, `aux_label`, `aux_point`, `aux_seq`), each weighted by its hp and
    returned unweighted for the log."""
    tap = hp["layers"] - 1
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        taps = (tap,) if hp.get("aux_label") or hp.get("aux_point") else ()
        out = fwd.forward_group(model, b, tap=taps)
        final = fwd.label_scores(model, out["users"][:, -1:], b["labels"])[:, 0]
        aux = torch.zeros(4, device=final.device)  # unweighted: item, own label, pointer, seq
        if hp.get("aux_item"):
            logits = item_logits(model, out["users"][:, -1], hp["item_ids"])
            aux[0] = F.cross_entropy(logits.float(), b["target_item"])
        if hp.get("aux_label"):
            il = item_label_logits(model, b, out, tap).float()
            want = torch.arange(il.shape[1]).expand(il.shape[0], -1)
            aux[1] = F.cross_entropy(il.flatten(0, 1), want.flatten())
        if hp.get("aux_seq") and b["seq_next"].numel():
            logits = item_logits(model, out["users"][:, :-1], hp["item_ids"])
            aux[3] = F.cross_entropy(logits.flatten(0, 1).float(), b["seq_next"].flatten())
        if hp.get("aux_point"):
            pl = point_logits(model, b, out, tap).float()
            aux[2] = F.cross_entropy(pl, b["target"]) + to_teacher(pl, b["teacher"],
                                                                    b["kd_mask"])
    final = final.float()
    ce = F.cross_entropy(final, b["target"])
    kd = to_teacher(final, b["teacher"], b["kd_mask"])
    top = max(1, final.shape[1] // 10)
    hit = (final > final.gather(1, b["target"][:, None])).sum(1).lt(top).float().mean()
    weighted = (hp.get("aux_item", 0.0) * aux[0] + hp.get("aux_label", 0.0) * aux[1]
                + hp.get("aux_point", 0.0) * aux[2] + hp.get("aux_seq", 0.0) * aux[3])
    return ce + hp["kd"] * kd + weighted, ce.detach(), kd.detach(), hit.detach(), aux.detach()


def init_readout(model, gain, scale, dims=32):
    """hp readout_init (with `item_init`): the last layer's last head (the one `aux_point`
    reads) starts as the pointer the aux losses teach. Its query and key read the residual's
    first `dims` dims (where `item_init` put the teacher's item factors) into the head's
    slowest RoPE pairs, so the score barely depends on distance; its value and output pass
    the residual's first `head_dim` dims through x`scale` (an item's own label, `aux_label`,
    to the final token). With one head (the recipe) that is the whole residual; with more
    (a capacity variant, hp `heads`/`kv_heads`) the other heads keep their random init.
    Everything stays trainable."""
    a = model.model.layers[-1].self_attn
    d = a.head_dim
    hidden = a.q_proj.weight.shape[1]
    heads, kv_heads = a.q_proj.weight.shape[0] // d, a.k_proj.weight.shape[0] // d
    if dims > d or d > hidden:
        raise SystemExit(f"[plain] readout_init needs head_dim >= {dims} (has {d})")
    h = heads - 1
    q0, k0 = h * d, (h // (heads // kv_heads)) * d  # its query rows, its key/value head's
    half = d // 2
    slow = [half - dims // 2 + j % (dims // 2) + half * (j // (dims // 2)) for j in range(dims)]
    with torch.no_grad():
        a.q_proj.weight[q0:q0 + d].zero_()
        a.k_proj.weight[k0:k0 + d].zero_()
        for proj, at in ((a.q_proj, q0), (a.k_proj, k0), (a.v_proj, k0)):
            if proj.bias is not None:
                proj.bias[at:at + d].zero_()
        for j, row in enumerate(slow):
            a.q_proj.weight[q0 + row, j] = gain
            a.k_proj.weight[k0 + row, j] = 1.0
        a.v_proj.weight[k0:k0 + d].copy_(torch.eye(d, hidden))
        a.o_proj.weight[:, q0:q0 + d].copy_(scale * torch.eye(hidden, d))


def start_from(trainer, path, train_only):
    """hp init_from PATH: the weights of an earlier export (train_ranker.py --export) as the
    start; hp train_only "a,b": only parameters whose names contain one of these train (the
    rest frozen), e.g. "layers.3.self_attn.v_proj,layers.3.self_attn.o_proj" to learn the
    readout's copy of a pointer that formed in the first run."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    state = {k: v for k, v in blob["state"].items() if "rotary_emb" not in k}
    rows = state.pop("embed_rows")
    model = trainer.model
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"model.embed_tokens.weight", "lm_head.weight"}:
        raise SystemExit(f"[plain] {path} does not fit: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(rows)
    freeze(trainer, train_only)
    trainer.log(f"[plain] started from {path}")


class Feed:
    """The batches the workers build, in order. On a budget (device runs) a step that finds no
    new batch draws a kept one again, so the GPU never waits; on a step count (the CPU recipe)
    it waits for the next one and drops what it used, so a seed gives the same run."""

    def __init__(self, trainer, hp):
        self.workers = hp.get("workers") or max(1, min(14, len(os.sched_getaffinity(0)) - 2))
        # (the device lends 16 cores; a container may report its host's count)
        self.cap = int(hp.get("max_batches", 30000))
        self.pool = mp.get_context("fork").Pool(self.workers, initializer=_worker_init)
        self.kept, self.lock, self.stop, self.failed = [], threading.Lock(), threading.Event(), []
        self.order = random.Random(hp["seed"] + 7)
        self.fresh = self.reused = 0
        self.base = 0  # batches below it were freed (used on a step count): never drawn again
        self.feeder = threading.Thread(target=self._pull, daemon=True)
        self.feeder.start()

    def _pull(self):
        try:
            for item in self.pool.imap(make_batch, range(self.cap), chunksize=2):
                with self.lock:
                    self.kept.append(item)
                if self.stop.is_set():
                    break
        except Exception as e:  # a worker's error: the loop raises it
            self.failed.append(e)

    def wait(self, n):
        while len(self.kept) < min(n, self.cap) and self.feeder.is_alive():
            time.sleep(0.05)

    def next(self, reuse):
        if not reuse:
            self.wait(self.fresh + 1)
        with self.lock:
            n = len(self.kept)
            if self.fresh < n:
                kind, b = self.kept[self.fresh]
                if not reuse:
                    self.kept[self.fresh] = None  # never drawn again: free it
                    self.base = self.fresh + 1
                self.fresh += 1
                return kind, b
        if n <= self.base or not reuse:
            raise RuntimeError(f"[plain] no batches: {self.failed}")
        self.reused += 1
        return self.kept[self.base + self.order.randrange(n - self.base)]

    def close(self):
        self.stop.set()
        self.pool.terminate()


def run(trainer):
    """Stage 1 on the trainer's hp, then (hp `then`, its overrides) stage 2 from where it ended
    on the same stream of batches; the report has each stage's curve."""
    global _T
    hp = trainer.hp
    _T = trainer
    feed = Feed(trainer, hp)
    if hp.get("readout_init"):
        init_readout(trainer.model, hp["readout_init"], hp.get("readout_scale", 1.0))
    if hp.get("init_from"):
        start_from(trainer, hp["init_from"], hp.get("train_only", ""))
    if hp.get("label_gain") and not hp.get("init_from"):  # (a started run has its scale)
        with torch.no_grad():  # every label row scaled alike (a frozen row keeps this scale)
            trainer.model.model.embed_tokens.weight[label_rows(hp)] *= hp["label_gain"]
    if hp.get("label_frozen"):
        freeze_labels(trainer)
    trainer.to(trainer.target_device)  # after the fork: the workers never touch CUDA
    t0 = time.time()
    feed.wait(32)
    trainer.log(f"[plain] {feed.workers} workers, first {len(feed.kept)} batches in "
                f"{time.time() - t0:.1f}s")
    try:
        report = dict(stage(trainer, hp, feed), workers=feed.workers)
        trainer.steps_run = {"rank": report["steps"]}
        if hp.get("then"):
            # stage 2 runs on its own steps unless `then` gives it a budget of its own
            second = {**hp, "budget_s": 0, "init_from": None, **hp["then"]}
            freeze(trainer, second.get("train_only", ""))
            report["then"] = stage(trainer, second, feed)
            trainer.steps_run["then"] = report["then"]["steps"]
        if hp.get("tune"):
            feed = tune(trainer, hp, feed, report)
    finally:
        feed.close()
    report.update(fresh_batches=feed.fresh, reused_batches=feed.reused)
    trainer.extra_report = dict(plain=report)
    trainer.model.eval()
    return trainer.finish()


def tune(trainer, hp, feed, report):
    """hp `tune` (its overrides): a last stage on batches of its own (another `mix`, share of
    fully pooled batches `pool_full`, pooled positions `pool_pos`), every weight learning
    again but the frozen label rows. Batches are made from the trainer's hp, so it gets the
    stage's and a new feed from batch 0: the same batches as a run started from the first
    stages' weights with these overrides. Returns the new feed (the caller closes it)."""
    third = {**hp, "budget_s": 0, "init_from": None, "then": None, "tune": None, **hp["tune"]}
    feed.close()
    trainer.hp = third
    trainer.s.pool_full = third.get("pool_full", 0.3)
    fwd.POOLED_POS = third.get("pool_pos", "shared")
    for p in trainer.model.parameters():
        p.requires_grad_(p is not trainer.full.weight)
    freeze(trainer, third.get("train_only", ""))
    feed = Feed(trainer, third)
    feed.wait(32)
    report["tune"] = stage(trainer, third, feed)
    trainer.steps_run["tune"] = report["tune"]["steps"]
    return feed


def freeze_labels(trainer):
    """hp label_frozen: every label row (positional and pool slot) keeps its random init. A
    pool slot's label is one of 12,288 and a run shows each a few times, where the 100
    positional ones come in every prompt: trained, the two kinds drift apart and the copy
    learnt on the positional ones does not carry to the slots. Frozen, all are alike."""
    hp = trainer.hp
    w = trainer.model.model.embed_tokens.weight
    keep = torch.ones(w.shape[0], 1)
    keep[label_rows(hp)] = 0.0
    w.register_hook(lambda g: g * keep.to(g.device))


def label_rows(hp):
    """Token ids of every label: the positional ones, then the pool slots'."""
    return slice(hp["label_base"], hp["label_base"] + layout.MAX_ITEMS + hp["pool_slots"])


def freeze(trainer, train_only):
    """hp train_only "a,b": only parameters whose names contain one of these train."""
    names = [n for n in train_only.split(",") if n]
    if not names:
        return
    for n, p in trainer.model.named_parameters():
        p.requires_grad_(any(x in n for x in names))
    trainer.log(f"[plain] training only "
                f"{[n for n, p in trainer.model.named_parameters() if p.requires_grad]}")


def stage(trainer, hp, feed):
    """One stage: AdamW over the parameters that train, `steps` steps (or as many as
    `budget_s` allows), the cosine schedule over them; returns the stage's report."""
    log, device, model = trainer.log, trainer.device, trainer.model
    amp = device.type == "cuda"
    params = [p for p in model.parameters() if p is not trainer.full.weight and p.requires_grad]
    opt = torch.optim.AdamW(params, lr=hp["lr"], betas=(0.9, 0.98),
                            weight_decay=hp.get("wd", 0.01))
    total, step = hp["steps"], 0
    sums = torch.zeros(8, device=device)
    curve, t_measure, t_train = [], None, time.time()
    budget = hp.get("budget_s", 0)
    reuse = bool(budget)
    plan_at = int(hp.get("plan_at", 500))  # the cosine barely moved by then (total 1e6 before)
    timed = bool(budget and hp.get("curriculum"))  # on time: steps differ in cost
    ks = {}  # candidate counts of the steps since the last line
    lr = hp["lr"]

    def window(end=False):
        """The steps since the last line, averaged: one curve point and one log line."""
        nonlocal ks
        ce_m, kd_m, hit_m, item_m, own_m, point_m, seq_m, _ = (sums / sums[7]).tolist()
        sums.zero_()
        curve.append(dict(step=step, ce=round(ce_m, 4), kd=round(kd_m, 4),
                          train_r10=round(hit_m, 4), s=round(time.time() - t_train, 1),
                          candidates=dict(ks), lr=lr, aux_item=round(item_m, 4),
                          aux_label=round(own_m, 4), aux_point=round(point_m, 4),
                          aux_seq=round(seq_m, 4)))
        log(f"[plain] step {step}{' (end)' if end else f'/{total}'} ce {ce_m:.3f} kd {kd_m:.3f} "
            f"item {item_m:.3f} own label {own_m:.3f} point {point_m:.3f} seq {seq_m:.3f} "
            f"train top-10% {hit_m:.3f} K {dict(ks)} lr {lr:.2e} fresh {feed.fresh} "
            f"reused {feed.reused} {time.time() - t_train:.0f}s")
        ks = {}

    while step < total:
        done = None
        if timed:
            done = (time.time() - t_train) / budget
            if done >= 1.0:
                break
        kind, b = feed.next(reuse)
        b = to_device(b, device)
        loss, ce, kd, hit, aux = loss_of(model, b, hp, amp)
        lr = trainer.lr(step, total, hp["lr"], done, hp["warmup"])
        for g in opt.param_groups:
            g["lr"] = lr
        ks[b["labels"].shape[1]] = ks.get(b["labels"].shape[1], 0) + 1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sums += torch.cat([torch.stack([ce, kd, hit]), aux, torch.ones(1, device=device)])
        step += 1
        # The rate is measured over steps plan_at/3..plan_at: the first steps meet new shapes
        # (kernel selection) and ran 4x slower than the rest on the H200 (2026-11-27 run).
        if step == plan_at // 3:
            if amp:
                torch.cuda.synchronize()
            t_measure = time.time()
        if step == plan_at and budget and not timed:
            if amp:
                torch.cuda.synchronize()
            rate = (time.time() - t_measure) / (plan_at - plan_at // 3)
            total = min(hp["steps"], max(plan_at + 1, plan_at + int(
                (budget - (time.time() - t_train)) / rate)))
            log(f"[plain] {rate * 1000:.1f} ms/step, budget {budget}s: {total} steps")
        if step % hp.get("log_every", 200) == 0 or step == total:
            window()
    if sums[7] > 0:  # a timed run's last partial window
        window(end=True)
    wall = time.time() - t_train
    return dict(steps=step, train_s=round(wall, 1), ms_per_step=round(1000 * wall / max(step, 1), 2),
                curve=curve, ce_first_last=[curve[0]["ce"], curve[-1]["ce"]] if curve else None)
