"""Trains the retrieval model: a Qwen2 of the tiny testbed model's shape that writes the next
item's semantic-ID code after a user's history of codes (retriever/prompt.py), on Amazon
Beauty's training users (ranker/data.py's split: held-out and dev users never train).

Every sequence `pad^r c(x1) id(x1) SEP … SEP c(xm) id(xm)` (a user's last HISTORY + 1 items) trains
every code token after a SEP at once; batches are drawn in groups of similar length. Training
runs on a compact vocabulary (the pad token, SEP, the code tokens and the item id tokens);
`export`
writes them into the testbed tokenizer's 65,536 ids. The loss is the full-vocabulary
cross-entropy of the served model, whose output rows outside [SEP, highest code token] are
zero: those ~65k rows are one class of logit log(count) + 0, so the engine's log-probabilities
are exactly the trained ones.
"""
import math, random

import torch
import torch.nn.functional as F

from retriever import prompt as P

CONFIG = dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
              tie_word_embeddings=False, vocab_size=65536, max_position_embeddings=16384)
HP = dict(steps=2400, batch=64, bucket=8, lr=2e-3, warmup=100, weight_decay=0.05, seed=0, pad_max=31,
          dev_users=200, dev_width=32)


class Trainer:
    def __init__(self, data, keys, codes, pad_token, hp, log):
        self.hp, self.log, self.pad = hp, log, pad_token
        self.codes = [codes[keys[i % len(keys)]] for i in range(max(data.items) + 1)]
        self.catalog = codes  # catalog id -> code
        self.hi = max(t for c in codes.values() for t in c)
        # Compact ids: 0 the pad token, 1 + (t - SEP) for SEP and the codes (the output rows),
        # then the item id tokens.
        self.out_rows = self.hi - P.SEP + 1
        self.vocab = 1 + self.out_rows + len(self.codes)
        self.other = math.log(CONFIG["vocab_size"] - self.out_rows)
        self.train, self.dev = [], []
        for (uid, items), split in zip(data.users, data.split):
            if split == "train":
                self.train.append(items[-(P.HISTORY + 1):])
            elif split == "dev":
                self.dev.append(items)
        self.dev = self.dev[:hp["dev_users"]]
        pop = {}
        for items in self.train:
            for i in items:
                k = keys[i % len(keys)]
                pop[k] = pop.get(k, 0) + 1
        self.popular = [k for k, _ in sorted(pop.items(), key=lambda kv: (-kv[1], kv[0]))[:10]]
        self.keys = keys
        self.loss_curve = []

    def model(self, vocab=None):
        from transformers import Qwen2Config, Qwen2ForCausalLM
        torch.manual_seed(self.hp["seed"])
        return Qwen2ForCausalLM(Qwen2Config(**{**CONFIG, "vocab_size": vocab or self.vocab}))

    def compact(self, tokens):
        return [0 if t == self.pad else 1 + t - P.SEP if t >= P.SEP
                else 1 + self.out_rows + t - P.ID_BASE for t in tokens]

    def full_ids(self):
        """The testbed tokenizer's id of each compact id."""
        return torch.tensor([self.pad] + list(range(P.SEP, self.hi + 1))
                            + [P.id_token(i) for i in range(len(self.codes))])

    def export(self, m):
        """The compact model in the testbed tokenizer's ids: input rows where the ids are
        (the rest keep their seeded init; no prompt holds them), output rows there and zero
        elsewhere."""
        full = self.model(CONFIG["vocab_size"])
        state = {k: v for k, v in m.state_dict().items()
                 if k not in ("model.embed_tokens.weight", "lm_head.weight")}
        full.load_state_dict(state, strict=False)
        ids = self.full_ids()
        out = slice(1, 1 + self.out_rows)
        with torch.no_grad():
            full.model.embed_tokens.weight[ids] = m.model.embed_tokens.weight
            full.lm_head.weight.zero_()
            full.lm_head.weight[ids[out]] = m.lm_head.weight[out]
        return full

    def batch(self, rng, users):
        seqs, targets = [], []
        for items in users:
            s = [0] * rng.randint(0, self.hp["pad_max"])
            t = []
            for n, it in enumerate(items):
                if n:
                    s.append(1)
                code = self.compact(self.codes[it])
                if n:
                    t.extend(range(len(s) - 1, len(s) - 1 + len(code)))
                s.extend(code)
                s.extend(self.compact([P.id_token(it)]))
            seqs.append(s)
            targets.append(t)
        T = max(map(len, seqs))
        ids = torch.zeros((len(seqs), T), dtype=torch.long)
        mask = torch.zeros((len(seqs), T), dtype=torch.long)
        rows, cols, gold = [], [], []
        for b, (s, t) in enumerate(zip(seqs, targets)):
            ids[b, :len(s)] = torch.tensor(s)
            mask[b, :len(s)] = 1
            for p in t:
                rows.append(b)
                cols.append(p)
                gold.append(s[p + 1] - 1)
        return ids, mask, torch.tensor(rows), torch.tensor(cols), torch.tensor(gold)

    def loss(self, m, ids, mask, rows, cols, gold):
        h = m.model(input_ids=ids, attention_mask=mask).last_hidden_state[rows, cols]
        logits = h @ m.lm_head.weight[1:1 + self.out_rows].T
        full = torch.cat([logits, torch.full((len(gold), 1), self.other)], 1)
        return F.cross_entropy(full, gold)

    def run(self):
        hp = self.hp
        rng = random.Random(hp["seed"])
        m = self.model()
        opt = torch.optim.AdamW(m.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"],
                                betas=(0.9, 0.98))
        order, queue = [], []
        for step in range(hp["steps"]):
            if not queue:  # `bucket` batches of similar lengths, in random order
                n = hp["batch"] * hp["bucket"]
                while len(order) < n:
                    order += rng.sample(range(len(self.train)), len(self.train))
                group = sorted(order[:n], key=lambda i: len(self.train[i]))
                del order[:n]
                queue = [group[j:j + hp["batch"]] for j in range(0, n, hp["batch"])]
                rng.shuffle(queue)
            users = [self.train[i] for i in queue.pop()]
            lr = hp["lr"] * min(1.0, (step + 1) / hp["warmup"]) * 0.5 * (
                1 + math.cos(math.pi * step / hp["steps"]))
            for g in opt.param_groups:
                g["lr"] = lr
            loss = self.loss(m, *self.batch(rng, users))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            if step % 100 == 0 or step == hp["steps"] - 1:
                self.loss_curve.append([step, round(loss.item(), 4)])
                self.log(f"[retriever] step {step}/{hp['steps']} loss {loss.item():.4f}")
        return m, self.export(m)

    def prompt(self, history):
        return P.user_tokens([(self.codes[i], i) for i in history[-P.HISTORY:]]) + [P.SEP]

    @torch.no_grad()
    def search(self, m, prompt, width, k=10):
        """Trie-constrained beam search over the catalog (no cache; a check, not serving):
        the top `k` catalog ids by summed full-vocabulary log-probability."""
        trie = self.trie()
        beams, found = [((), 0.0)], []
        while beams:
            ids = torch.tensor([prompt + list(c) for c, _ in beams])
            logits = m(input_ids=ids).logits[:, -1].float()
            lp = torch.log_softmax(logits, -1)
            nxt = []
            for (c, s), row in zip(beams, lp):
                for t, child in trie[c].items():
                    nxt.append((c + (t,), s + row[t].item(), child))
            nxt.sort(key=lambda x: -x[1])
            beams = []
            for c, s, child in nxt[:width]:
                if child is None:
                    found.append((s, c))
                else:
                    beams.append((c, s))
        found.sort(key=lambda x: -x[0])
        by_code = self.by_code()
        return [by_code[c] for _, c in found[:k]]

    def trie(self):
        if not hasattr(self, "_trie"):
            t = {(): {}}
            for code in self.catalog.values():
                for d in range(len(code)):
                    pre = tuple(code[:d])
                    t.setdefault(pre, {})[code[d]] = None if d == len(code) - 1 else True
                    if d < len(code) - 1:
                        t.setdefault(tuple(code[:d + 1]), {})
            self._trie = t
        return self._trie

    def by_code(self):
        return {tuple(c): k for k, c in self.catalog.items()}

    def dev_metrics(self, m):
        """Recall@10 / NDCG@10 of the constrained search and of popularity on dev users."""
        m.eval()
        hits = {"model": [], "popularity": []}
        for items in self.dev:
            target = self.keys[items[-1] % len(self.keys)]
            got = self.search(m, self.prompt(items[:-1]), self.hp["dev_width"])
            for name, ranked in (("model", got), ("popularity", self.popular)):
                hits[name].append(ranked.index(target) + 1 if target in ranked else 0)
        out = {}
        for name, h in hits.items():
            out[name] = {"recall@10": round(sum(1 for r in h if r) / len(h), 4),
                         "ndcg@10": round(sum(1 / math.log2(r + 1) for r in h if r) / len(h),
                                          4)}
        out["users"] = len(self.dev)
        return out
