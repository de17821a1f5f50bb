"""The GR ranker's hyperparameters: the recipe (HP, stamped: a change retrains) and
`recipe_hp`, the recipe with --hp overrides on top."""

# Everything that changes the weights is here and in the recipe stamp. Recipe VERSION 3
# (docs/quality.md, How the ranker is made): items as their own id tokens (item_ids,
# item_tokens 1), an ordinary init trained end to end (plain.py) with a loss for each part of
# the circuit (aux_*), the teacher's item factors as the id rows' start (item_init) and the
# last layer's head started as the pointer (readout_init); then a second stage (`then`, its
# overrides) in which only the last layer's attention and the final norm learn the copy from
# the pointer to the label. Steps, not seconds, so a seed gives the same weights.
HP = dict(hidden=128, layers=4, heads=1, kv_heads=1, ffn=512, item_tokens=1,
          history_items=20, candidates=100, group_users=64, up_users=8, steps=2000, lr=2e-3,
          warmup=100, pool_slots=12288, mix="ip:3,pool:4,up:3", kd=1.0, kd_temp=1.0, rank=32,
          seed=0, item_ids=20480, label_base=4096, dev_users=489,
          aux_item=1.0, aux_label=1.0, aux_point=2.0, aux_seq=1.0, item_init=2.0, readout_init=1.0,
          label_frozen=1, label_gain=4.4,
          then=dict(steps=3000, warmup=30, train_only="layers.3.self_attn,model.norm",
                    aux_point=1.0, aux_item=0.0, aux_label=0.0, aux_seq=0.0))
# Stamp compatibility: settings of recipe VERSION 2 (its encoder stage, probes and hand-built
# channels; docs/history.md) and its switch to VERSION 3 (`plain` 1) that no code reads any
# more but that every VERSION 3 stamp carries, at these values. Kept in the stamp (and not
# overridable) so the checkpoints trained before that code was removed stay current; drop
# them with the next VERSION bump.
STAMP_ONLY = dict(title_tap=2, enc_steps=0, enc_titles=128, enc_users=4, enc_lr=3e-3,
                  probe_dims=8, aux=0.3, probe=1.0, label_sigma=0.02, label_flag=4.0,
                  copy_freqs=6, copy_gain=480.0, copy_scale=0.1, read_scale=1.0,
                  read_gain=12.0, out_gain=10.0, plain=1)


def recipe_hp(overrides):
    """The recipe's hp with `overrides` (--hp) on top: what training reads and the stamp
    holds. Recipe VERSION 2 (`base` 2, `plain` 0) is gone: asking for it is an error."""
    if overrides.get("base") == 2 or overrides.get("plain", 1) != 1:
        raise SystemExit("[ranker] recipe VERSION 2 (hp base 2, plain 0) was removed; its "
                         "code is in git history (docs/history.md)")
    for k, v in overrides.items():
        if k in STAMP_ONLY and v != STAMP_ONLY[k]:
            raise SystemExit(f"[ranker] hp {k} belongs to the removed recipe VERSION 2: "
                             "nothing reads it")
    return {**HP, **STAMP_ONLY, **overrides}
