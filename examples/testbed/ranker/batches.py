"""Training batches in recache's layouts. One batch is a group of users sharing one candidate
set (their next items plus popularity draws), laid out as recache would for each:

- `ip`: item-first, hot-first order simulated as recache's request counts after a random
  number of earlier requests (Poisson draws by popularity; ties by id), positional labels;
- `pool`: item-first with the item KV pool: a resident subset (all, the popular ones, or a
  random share) computed alone at a shared start position, with pool labels at random slots;
  a few non-resident items carry a slot label too (a fill in flight);
- `up`: user-first, candidates in a random request order, one prompt per user;
- `aup`: user-first with the pool (`--rank-pool-after-user`): each user's profile padded to
  whole blocks (`lead`), then the group's resident items, each computed alone at the position
  right after the profile, then the other items hot-first and the instruction.
Labels thus vary per example over both ranges recache uses, so the model must copy the label
that introduces the item it prefers rather than learn label ids. Every batch also says where
each item ends (`last`, `tail_ends`), for plain.py's auxiliary losses.
"""
import random

import numpy as np
import torch

from . import layout


def ends(start, lengths, skip=1):
    """Last-token index of consecutive segments (each `skip` tokens of label before it)."""
    out, at = [], start
    for n in lengths:
        at += n + skip
        out.append(at - 1)
    return out


class Sampler:
    def __init__(self, data, item_tokens, title_tokens, history_items, pool_slots, seed):
        self.data = data
        self.n_tok = item_tokens
        self.title_tokens = title_tokens
        self.history_items = history_items
        self.pool_slots = pool_slots
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        # (user index, target position): every next-item event of the training users.
        self.events = [(u, t) for u, (uid, h) in enumerate(data.users)
                       if data.split[u] == "train" for t in range(1, len(h))]
        # Events by profile length: a batch draws its users from one, so right-padding wastes
        # nothing; the first user is uniform over events, hence so is every user.
        self.by_len = {}
        for u, t in self.events:
            self.by_len.setdefault(min(t, history_items), []).append((u, t))
        self.instruction = None
        self.label_base = layout.LABEL_BASE  # recache's `--rank-label-base`
        self.id_base = 0  # hp `item_ids`: bench quality's `--item-id-base` (0: titles only)
        self.pool_full = 0.3  # hp `pool_full`: share of pooled batches with every item resident
        self.pad = None  # recache's pad token (the tokenizer's " "), for `aup`'s padded profile
        self.block = 32  # the engine's KV block: `aup` pads the profile to whole blocks

    def item(self, i):
        return layout.item_text(self.title_tokens[self.data.title_of(i)], self.n_tok, i,
                                self.id_base)

    def profile(self, history):
        """The user's text: the last `history_items` items' titles (bench quality's profile)."""
        return layout.profile([self.item(i) for i in history[-self.history_items:]])

    def user(self, history, target):
        return dict(profile=self.profile(history), target=target, history=history)

    def users(self, b):
        """b training events with distinct targets, of one profile length."""
        out, seen = [], set()
        u, t = self.events[self.rng.randrange(len(self.events))]
        same = self.by_len[min(t, self.history_items)]
        while len(out) < b:
            if out:
                u, t = same[self.rng.randrange(len(same))]
            h = self.data.users[u][1]
            if h[t] not in seen:
                seen.add(h[t])
                out.append(self.user(h[:t], h[t]))
        return out

    def hot_first(self, ids):
        lam = 0.5 * 10 ** (-3 * self.rng.random())
        counts = self.np.poisson([lam * self.data.count[i] for i in ids])
        return layout.hot_first(ids, [int(c) for c in counts])

    def residency(self, ids):
        """Which items the pool holds and their slots (a slot without residency: a fill in
        flight)."""
        k, mode = len(ids), self.rng.random()
        if mode < self.pool_full:
            resident = [True] * k
        elif mode < 0.7:
            cut = sorted(self.data.count[i] for i in ids)[self.rng.randrange(k)]
            resident = [self.data.count[i] >= cut for i in ids]
        else:
            share = self.rng.random()
            resident = [self.rng.random() < share for _ in ids]
        pending = [not r and self.rng.random() < 0.05 for r in resident]
        picked = self.rng.sample(range(self.pool_slots), k)
        return resident, [picked[j] if resident[j] or pending[j] else None for j in range(k)]

    def _suffixes(self, us):
        """Users' rows (profile + instruction), right-padded."""
        rows = [u["profile"] + self.instruction for u in us]
        width = max(len(r) for r in rows)
        return dict(users=torch.tensor([r + [0] * (width - len(r)) for r in rows]),
                    hists=[u["history"] for u in us])

    def group(self, kind, us, k):
        """One item-first batch (`ip` or `pool`) for users `us` sharing k candidates."""
        ids = self.data.candidates(self.rng, [u["target"] for u in us], k)
        self.rng.shuffle(ids)
        items = [self.item(i) for i in ids]
        hot = self.hot_first(ids)
        resident, slots = self.residency(ids) if kind == "pool" else ([False] * k, [None] * k)
        tokens, labels, _ = layout.pooled([], items, hot, resident, slots, [],
                                          label_base=self.label_base)
        first = [j for j in hot if resident[j]]
        run = sum(len(items[j]) + 1 for j in first)
        order = [j for _, j in labels]
        where = {j: n for n, j in enumerate(order)}  # item -> its label's index
        b = dict(pooled=torch.tensor([tokens[n * (self.n_tok + 1):(n + 1) * (self.n_tok + 1)]
                                      for n in range(len(first))]) if first else None,
                 tail=torch.tensor([tokens[run:]]) if run < len(tokens) else None,
                 tail_start=run, user_start=len(tokens),
                 labels=torch.tensor([[label for label, _ in labels]] * len(us)),
                 target=torch.tensor([where[ids.index(u["target"])] for u in us]),
                 tail_ends=torch.tensor(ends(0, [self.n_tok] * (k - len(first))),
                                        dtype=torch.long),
                 candidates=[[ids[j] for j in order]] * len(us))
        b.update(self._suffixes(us))
        b["last"] = torch.tensor([[len(u["profile"]) + len(self.instruction) - 1] for u in us])
        return b

    def after_user(self, us, k):
        """One `aup` batch for users `us` (one profile length) sharing k candidates: `lead`
        [B, P] the padded profiles (positions 0..P-1), `pooled` the resident items (computed
        alone, at positions P..), `users` [B, T] the other items and the instruction, alike in
        every row but each seeing its own profile (positions from `user_start`)."""
        ids = self.data.candidates(self.rng, [u["target"] for u in us], k)
        self.rng.shuffle(ids)
        items = [self.item(i) for i in ids]
        hot = self.hot_first(ids)
        resident, slots = self.residency(ids)
        tokens, labels, _ = layout.pooled([], items, hot, resident, slots, [],
                                          label_base=self.label_base)
        first = [j for j in hot if resident[j]]
        run = sum(len(items[j]) + 1 for j in first)
        order = [j for _, j in labels]
        where = {j: n for n, j in enumerate(order)}
        leads = [u["profile"] + [self.pad] * (-len(u["profile"]) % self.block) for u in us]
        rest = tokens[run:] + self.instruction
        b = dict(lead=torch.tensor(leads),
                 pooled=torch.tensor([tokens[n * (self.n_tok + 1):(n + 1) * (self.n_tok + 1)]
                                      for n in range(len(first))]) if first else None,
                 tail=None, tail_start=len(leads[0]), user_start=len(leads[0]) + run,
                 users=torch.tensor([rest] * len(us)),
                 labels=torch.tensor([[label for label, _ in labels]] * len(us)),
                 target=torch.tensor([where[ids.index(u["target"])] for u in us]),
                 tail_ends=torch.tensor(ends(0, [self.n_tok] * (k - len(first))),
                                        dtype=torch.long),
                 candidates=[[ids[j] for j in order]] * len(us),
                 hists=[u["history"] for u in us])
        b["last"] = torch.tensor([[len(rest) - 1]] * len(us))
        return b

    def up(self, us, k):
        """User-first prompts for `us` (each its own candidates), right-padded into a batch;
        `last` picks every item's last token and then the final token."""
        rows, labs, targets, picks, cands = [], [], [], [], []
        for u in us:
            ids = self.data.candidates(self.rng, [u["target"]], k)
            self.rng.shuffle(ids)
            items = [self.item(i) for i in ids]
            tokens, labels = layout.build(layout.USER, u["profile"], items, list(range(k)),
                                          self.instruction, label_base=self.label_base)
            rows.append(tokens)
            labs.append([label for label, _ in labels])
            targets.append(ids.index(u["target"]))
            picks.append(ends(len(u["profile"]), [self.n_tok] * k) + [len(tokens) - 1])
            cands.append(ids)
        width = max(len(r) for r in rows)
        return dict(pooled=None, tail=None, tail_start=0, user_start=0,
                    users=torch.tensor([r + [0] * (width - len(r)) for r in rows]),
                    last=torch.tensor(picks), labels=torch.tensor(labs),
                    target=torch.tensor(targets), candidates=cands,
                    hists=[u["history"] for u in us])
