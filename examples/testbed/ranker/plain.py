"""Plain training of the GR ranker (issue 21 experiment, hp `plain` 1; docs/quality.md,
2026-11-27): an ordinary Qwen2 init (no hand-built channels or flags) trained end to end on
recache's layouts (batches.py: UP, IP, pooled) with the label CE at the final token plus
distillation towards the teacher over the prompt's candidates, and nothing else, for as many
steps as a wall-clock budget allows.

Owns the fast loop. Batches (batches.py's, with the teacher's normalized scores attached and
`last` cut to the final token) are built by CPU worker processes forked before the model
moves to the GPU, streamed in and kept; when the workers fall behind, the loop draws a kept
batch again, so the GPU never waits. The step count is fixed once from the measured step time
(hp `budget_s`), so the cosine schedule runs its whole course. bf16 autocast on CUDA.

hp `curriculum` "K1:N1,K2:N2,...": the first N1 batches hold K1 candidates, the next N2 K2, the
rest `candidates` (a pointer over 100 candidates never formed from the start: docs/quality.md,
2026-11-27; with few candidates the right one carries a larger share of the gradient). Steps
then differ in cost, so the schedule runs on time instead: the cosine follows elapsed/budget_s
and training stops at the budget. Train recall is reported as the top-10% hit rate at the
batch's K (Recall@10 at 100).

Checks of the pointer alone (docs/quality.md, eleventh session): hp `copy_task` p (the
target's title repeats as the profile's last; `copy_until`/`copy_fade` fade it into the real
task) and `label_hint` (the target's label as the instruction's first token).
"""
import multiprocessing as mp
import os, random, threading, time

import numpy as np
import torch
import torch.nn.functional as F

from . import model as fwd
from .train import to_teacher

_T = None  # the trainer, inherited by the forked workers (its CPU state only)
KEYS = ("pooled", "tail", "tail_start", "user_start", "users", "last", "labels", "target",
        "teacher", "kd_mask")


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

    def users(n):
        us = s.users(n)
        for u in us:
            copied.append(s.rng.random() < p)
            if copied[-1]:
                u["profile"] = u["profile"][:-s.n_tok] + s.item(u["target"])
        return us

    if kind == "up":
        b = s.up(users(hp["up_users"]), k)
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
    b["last"] = b["last"][:, -1:].contiguous()  # the loss reads the final token only
    # As numpy: torch tensors would cross the process boundary as shared-memory handles,
    # one open file per kept tensor.
    return kind, {k: b[k].numpy() if torch.is_tensor(b[k]) else b[k] for k in KEYS}


def to_device(b, device):
    return {k: torch.from_numpy(v).to(device, non_blocking=True) if isinstance(v, np.ndarray)
            else v for k, v in b.items()}


def loss_of(model, b, kd_weight, amp):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        out = fwd.forward_group(model, b)
        final = fwd.label_scores(model, out["users"][:, -1:], b["labels"])[:, 0]
    final = final.float()
    ce = F.cross_entropy(final, b["target"])
    kd = to_teacher(final, b["teacher"], b["kd_mask"])
    top = max(1, final.shape[1] // 10)
    hit = (final > final.gather(1, b["target"][:, None])).sum(1).lt(top).float().mean()
    return ce + kd_weight * kd, ce.detach(), kd.detach(), hit.detach()


def run(trainer):
    global _T
    hp, log = trainer.hp, trainer.log
    _T = trainer
    # (the device lends 16 cores; a container may report its host's count)
    workers = hp.get("workers") or max(1, min(14, len(os.sched_getaffinity(0)) - 2))
    cap = int(hp.get("max_batches", 30000))
    ctx = mp.get_context("fork")
    pool = ctx.Pool(workers, initializer=_worker_init)
    kept, lock, stop, failed = [], threading.Lock(), threading.Event(), []

    def pull():
        try:
            for item in pool.imap(make_batch, range(cap), chunksize=2):
                with lock:
                    kept.append(item)
                if stop.is_set():
                    break
        except Exception as e:  # a worker's error: the loop raises it
            failed.append(e)

    feeder = threading.Thread(target=pull, daemon=True)
    feeder.start()
    trainer.to(trainer.target_device)  # after the fork: the workers never touch CUDA
    device = trainer.device
    amp = device.type == "cuda"
    model = trainer.model
    params = [p for p in model.parameters() if p is not trainer.full.weight]
    opt = torch.optim.AdamW(params, lr=hp["lr"], betas=(0.9, 0.98),
                            weight_decay=hp.get("wd", 0.01))
    t0 = time.time()
    while len(kept) < min(32, cap) and feeder.is_alive():
        time.sleep(0.05)
    log(f"[plain] {workers} workers, first {len(kept)} batches in {time.time() - t0:.1f}s")
    order = random.Random(hp["seed"] + 7)
    total, step, fresh, reused = hp["steps"], 0, 0, 0
    sums = torch.zeros(4, device=device)
    curve, t_measure, t_train = [], None, time.time()
    budget = hp.get("budget_s", 0)
    plan_at = int(hp.get("plan_at", 500))  # the cosine barely moved by then (total 1e6 before)
    timed = bool(budget and hp.get("curriculum"))  # on time: steps differ in cost
    ks = {}  # candidate counts of the steps since the last line

    def window(end=False):
        """The steps since the last line, averaged: one curve point and one log line."""
        nonlocal ks
        ce_m, kd_m, hit_m, _ = (sums / sums[3]).tolist()
        sums.zero_()
        curve.append(dict(step=step, ce=round(ce_m, 4), kd=round(kd_m, 4),
                          train_r10=round(hit_m, 4), s=round(time.time() - t_train, 1),
                          candidates=dict(ks), lr=lr))
        log(f"[plain] step {step}{' (end)' if end else f'/{total}'} ce {ce_m:.3f} kd {kd_m:.3f} "
            f"train top-10% {hit_m:.3f} K {dict(ks)} lr {lr:.2e} fresh {fresh} reused {reused} "
            f"{time.time() - t_train:.0f}s")
        ks = {}

    while step < total:
        if timed:
            done = (time.time() - t_train) / budget
            if done >= 1.0:
                break
        with lock:
            n = len(kept)
        if not n:
            raise RuntimeError(f"[plain] no batches: {failed}")
        if fresh < n:
            kind, b = kept[fresh]
            fresh += 1
        else:
            kind, b = kept[order.randrange(n)]
            reused += 1
        b = to_device(b, device)
        loss, ce, kd, hit = loss_of(model, b, hp["kd"], amp)
        lr = trainer.lr(step, total, hp["lr"], done if timed else None)
        for g in opt.param_groups:
            g["lr"] = lr
        ks[b["labels"].shape[1]] = ks.get(b["labels"].shape[1], 0) + 1
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sums += torch.stack([ce, kd, hit, torch.ones((), device=device)])
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
    if sums[3] > 0:  # a timed run's last partial window
        window(end=True)
    stop.set()
    pool.terminate()
    wall = time.time() - t_train
    total = step
    trainer.steps_run = {"rank": total}
    trainer.extra_report = dict(plain=dict(
        steps=total, train_s=round(wall, 1), ms_per_step=round(1000 * wall / total, 2),
        fresh_batches=fresh, reused_batches=reused, workers=workers, curve=curve,
        ce_first_last=[curve[0]["ce"], curve[-1]["ce"]] if curve else None))
    model.eval()
    return trainer.finish()
