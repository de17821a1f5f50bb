"""Training of the GR ranker (see train_ranker.py for the recipe and the checkpoint).

Owns the Trainer the training loop (plain.py) and train_ranker.py share: one model (an HF
Qwen2ForCausalLM trained through model.py's forward), a teacher fitted on the training users
(teacher.py), the batch sampler (batches.py), the learning-rate schedule and the dev metric.
The hp (HP: the recipe, recipe VERSION 3) live in hp.py.
"""
import math, time

import torch
import torch.nn.functional as F

from . import batches, layout, model as fwd, teacher as teach

# The recipe's hp (HP, recipe_hp) live in hp.py; train.HP etc. stay the names callers use.
from .hp import HP, recipe_hp  # noqa: F401


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
        self.s = batches.Sampler(data, hp["item_tokens"], titles, hp["history_items"],
                                 hp["pool_slots"], hp["seed"])
        self.s.instruction = tok(layout.DEFAULT_INSTRUCTION, add_special_tokens=False)["input_ids"]
        self.s.pad = tok(" ", add_special_tokens=False)["input_ids"][-1]  # pipeline/mod.rs
        self.s.label_base = hp["label_base"]
        self.s.id_base = hp["item_ids"]
        self.s.pool_full = hp.get("pool_full", 0.3)
        fwd.POOLED_POS = hp.get("pool_pos", "shared")
        t0 = time.time()
        self.teacher = teach.Teacher(data, hp["rank"], hp["history_items"])
        log(f"[ranker] teacher fitted in {time.time() - t0:.0f}s")
        if hp.get("item_init"):
            self.init_item_rows(hp["item_init"])
        # Training touches token ids below `used` only (text tokens, label ranges, item ids):
        # train those rows as their own table, so the optimizer does not sweep all 65,536 each
        # step.
        self.full = self.model.model.embed_tokens
        self.model.model.embed_tokens = torch.nn.Embedding.from_pretrained(
            self.full.weight.detach()[:used].clone(), freeze=False)
        self.dev = [self.s.user(h[:-1], h[-1]) for (_, h), sp in zip(data.users, data.split)
                    if sp == "dev"][:hp.get("dev_users", 200)]
        self.steps_run = {}
        # stays on the CPU until plain.run has forked its batch workers (no CUDA in them)
        self.target_device = device
        self.to("cpu")

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
        # In place: `self.full` is tied to the LM head, so it moves with the model.
        self.model.to(device)
        t = self.teacher
        t.e, t.prior = t.e.to(device), t.prior.to(device)

    def scores(self, b):
        """The label scores at each user's final token of one batch (batches.py), [B, K]: what
        the served ranker ranks by."""
        out = fwd.forward_group(self.model, b)
        return fwd.label_scores(self.model, out["users"][:, -1:], b["labels"])[:, 0]

    def lr(self, step, total, peak, done=None, warmup=None):
        """Warm-up by steps (`warmup`, or hp's), then a cosine to 0.1x over step / total (or
        `done`, the share of a run on time that has passed: plain.py's curriculum)."""
        warm = min(1.0, (step + 1) / (warmup or self.hp["warmup"]))
        done = step / total if done is None else done
        return peak * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * done)))

    def layouts(self):
        """The layouts a run trains on: up, pool and ip, and aup where a stage mixes it in."""
        hp = self.hp
        mixes = [hp["mix"]] + [(hp.get(s) or {}).get("mix", "") for s in ("then", "tune")]
        return ("up", "pool", "ip") + (("aup",) if any("aup:" in m for m in mixes) else ())

    def dev_metrics(self, layouts=None):
        """Recall@10 / NDCG@10 on dev users' last items (100 candidates), per layout."""
        out = {}
        layouts = layouts or self.layouts()
        state = self.s.rng.getstate(), self.s.np.bit_generator.state
        with torch.no_grad():
            for kind in layouts:
                self.s.rng.seed(12345)
                hits = ndcg = 0.0
                for u in self.dev:
                    b = (self.s.up([u], 100) if kind == "up" else self.s.after_user([u], 100)
                         if kind == "aup" else self.s.group(kind, [u], 100))
                    sc = self.scores(b)
                    rank = int((sc[0] > sc[0, b["target"][0]]).sum())
                    hits += rank < 10
                    ndcg += 1 / math.log2(rank + 2) if rank < 10 else 0.0
                out[kind] = (round(hits / len(self.dev), 4), round(ndcg / len(self.dev), 4))
        self.s.rng.setstate(state[0])
        self.s.np.bit_generator.state = state[1]
        return out

    def run(self):
        """Trains (plain.py: both stages, and `tune` if set); returns the trained model."""
        from . import plain
        return plain.run(self)

    def finish(self):
        """The trained rows back into the full (tied) embedding."""
        compact = self.model.model.embed_tokens.weight.detach()
        with torch.no_grad():
            self.full.weight[:compact.shape[0]] = compact
        self.model.model.embed_tokens = self.full
        assert self.model.lm_head.weight is self.full.weight
        return self.model
