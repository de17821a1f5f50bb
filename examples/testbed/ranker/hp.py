"""The GR ranker's hyperparameters: the recipe (HP, stamped: a change retrains), the older
recipe VERSION 2 (HP_V2) and the experiment switches that are off in both (EXTRA)."""
from . import layout

# Everything that changes the weights is here and in the recipe stamp. Recipe VERSION 3
# (docs/quality.md, How the ranker is made): items as their own id tokens (item_ids,
# item_tokens 1), an ordinary init trained end to end (plain.py) with a loss for each part of
# the circuit (aux_*), the teacher's item factors as the id rows' start (item_init) and the
# last layer's head started as the pointer (readout_init); then a second stage (`then`, its
# overrides) in which only the last layer's attention and the final norm learn the copy from
# the pointer to the label. Steps, not seconds, so a seed gives the same weights.
HP = dict(hidden=128, layers=4, heads=1, kv_heads=1, ffn=512, title_tap=2, item_tokens=1,
          history_items=20, candidates=100, group_users=64, up_users=8, enc_steps=0,
          enc_titles=128, enc_users=4, steps=2000, lr=2e-3, enc_lr=3e-3, warmup=100, pool_slots=12288,
          mix="ip:3,pool:4,up:3", probe_dims=8, kd=1.0, kd_temp=1.0, aux=0.3, probe=1.0, rank=32, seed=0,
          label_sigma=0.02, label_flag=4.0, copy_freqs=6, copy_gain=480.0, copy_scale=0.1,
          read_scale=1.0, read_gain=12.0, out_gain=10.0,
          plain=1, item_ids=20480, label_base=4096, dev_users=489,
          aux_item=1.0, aux_label=1.0, aux_point=2.0, aux_seq=1.0, item_init=2.0, readout_init=1.0,
          label_frozen=1, label_gain=4.4,
          then=dict(steps=3000, warmup=30, train_only="layers.3.self_attn,model.norm",
                    aux_point=1.0, aux_item=0.0, aux_label=0.0, aux_seq=0.0))
# Recipe VERSION 2 (titles only, hand-built channels: at chance, docs/history.md),
# what hp `base` 2 starts from: the earlier device experiments (train_ranker_device's sets
# before `ids`) are written against it.
HP_V2 = dict(HP, heads=2, kv_heads=2, item_tokens=18, group_users=16, up_users=2,
             enc_steps=1200, steps=900, warmup=60, plain=0, item_ids=0, label_base=layout.LABEL_BASE,
             dev_users=200, aux_item=0.0, aux_label=0.0, aux_point=0.0, aux_seq=0.0,
             item_init=0.0, readout_init=0.0, label_frozen=0, label_gain=0.0, then=None)


def recipe_hp(overrides):
    """The recipe's hp with `overrides` (--hp) on top; `base` 2 starts from HP_V2."""
    return {**(HP_V2 if overrides.get("base") == 2 else HP), **overrides}


# Experiments (issue 21, 2026-11-26): off in the recipe and not stamped (an export that sets
# them carries them as overrides). item_dims > 0 builds the item channel (`item_channel`);
# label_base is recache's --rank-label-base (4096: labels no text uses); read_temp,
# read_frozen, main_ce and att_ce sharpen the readout's copy (docs/history.md).
# score_fix and enc_frozen keep the seeded comparison through stage 2 (`fix_score`), end_gate
# gates the item channel to item ends (weights.end_gate) (docs/history.md).
# plain 1: no hand-built weights, an ordinary init trained end to end by ranker/plain.py
# (CE + KD only, batches built ahead by CPU workers; docs/history.md).
EXTRA = dict(item_dims=0, bag_decay=0.0, window_reach=4200, window_iters=3000, score_pairs=3,
             score_gain=4.0, item_probe=1.0, seed_gain=1.5, label_base=layout.LABEL_BASE,
             mid_frozen=0, end_flag=0.0, read_temp=1.0, read_frozen=0,
             main_ce=1.0, att_ce=1.0, score_fix=0, enc_frozen=0, end_gate=0.0, plain=0,
             item_ids=0)
# item_ids N > 0: every item's text starts with its own token N + item id (bench quality's
# `--item-id-base N`), the title fills the other item_tokens - 1 (docs/quality.md, How
# the ranker is made): a GR model's item tokens, where titles alone name 3.3 Beauty items each.
