"""The ranker's forward pass for training: an HF Qwen2ForCausalLM's own weights and modules,
run over the three parts of recache's layouts so that what every request shares is computed
once per batch:

- `pooled`: items computed alone from position 0 (a batch of segments, each causal in itself);
- `tail`: a causal run that sees all pooled items (the non-resident items of a pooled prompt,
  or every item of a plain item-first prompt);
- `users`: B user+instruction suffixes, each seeing all items before it and itself causally.
A user-first prompt is a `users` part with no context. An `aup` batch (user-first with the
pool) has a `lead` before all of these: each user's padded profile, seen by its own row's
`users` part but not by the pooled items, which sit at the positions right after it. `check_against_hf` compares this with
the HF model run on the flattened prompt (explicit positions and a 4-D mask, as
`shim/python/tests/item_pool_check.py` does), so the weights trained here mean the same in
vLLM, which computes those layouts natively.
"""
import torch
import torch.nn.functional as F
from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

# hp `pool_pos`: where pooled items sit in RoPE position space. "shared": every item from 0
# (the pool's fill, recache's `--rank-pool-recompute none`); "true": each at its token index
# (the connector re-rotates K there: `none:pos=true`). A segment alone has the same hidden
# states either way; only its K differs.
POOLED_POS = "shared"


def _attend(attn, x, cos, sin, ctx, last=None):
    """One attention block; `ctx`: (k, v) of earlier parts ([1, kvh, C, d]) or None. With
    `last` ([N, P] token indices) only those tokens' outputs are computed (the final layer:
    the loss reads a few positions per row), each seeing the context and its row up to itself."""
    n, length, _ = x.shape
    d = attn.head_dim
    rows = torch.arange(n)[:, None]
    xq = x if last is None else x[rows, last]
    q = attn.q_proj(xq).view(n, xq.shape[1], -1, d).transpose(1, 2)
    k = attn.k_proj(x).view(n, length, -1, d).transpose(1, 2)
    v = attn.v_proj(x).view(n, length, -1, d).transpose(1, 2)
    if last is None:
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
    else:
        q, _ = apply_rotary_pos_emb(q, q, cos[rows, last], sin[rows, last])
        k, _ = apply_rotary_pos_emb(k, k, cos, sin)
    own = (k, v)
    c = 0 if ctx is None else ctx[0].shape[2]
    if ctx is not None:
        k = torch.cat([ctx[0].expand(n, -1, -1, -1), k], 2)
        v = torch.cat([ctx[1].expand(n, -1, -1, -1), v], 2)
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    if last is not None:
        mask = (torch.arange(c + length)[None, None] <= (c + last)[:, :, None])[:, None]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling)
    elif ctx is None:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=attn.scaling)
    else:
        mask = torch.ones(length, c + length, dtype=torch.bool).tril(c)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling)
    out = out.transpose(1, 2).reshape(n, xq.shape[1], -1)
    return attn.o_proj(out), own


def run_part(model, ids, pos, ctx=None, last=None, tap=()):
    """ids/pos: [N, L]; ctx: per layer (k, v) of what the part sees before itself, or None.
    Returns the final hidden states (before the final norm): [N, L, H], or with `last` ([N, P]
    token indices) only theirs, [N, P, H]; per-layer (k, v) of the part; and for each n in
    `tap` the residual stream after the first n layers, [N, L, H] (a dict by n)."""
    body = model.model
    x = body.embed_tokens(ids)
    cos, sin = body.rotary_emb(x, pos)
    kvs, tapped = [], {}
    layers = body.layers
    for i, layer in enumerate(layers):
        if i in tap:
            tapped[i] = x
        final = last if i == len(layers) - 1 else None
        a, own = _attend(layer.self_attn, layer.input_layernorm(x), cos, sin,
                         None if ctx is None else ctx[i], final)
        kvs.append(own)
        if final is not None:
            x = x[torch.arange(x.shape[0])[:, None], final]
        x = x + a
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    if len(layers) in tap:
        tapped[len(layers)] = x
    return x, kvs, tapped


def flat(kvs):
    """Per-layer (k, v) of N segments [N, kvh, L, d] as one context [1, kvh, N*L, d]."""
    out = []
    for k, v in kvs:
        n, h, length, d = k.shape
        out.append((k.permute(1, 0, 2, 3).reshape(1, h, n * length, d),
                    v.permute(1, 0, 2, 3).reshape(1, h, n * length, d)))
    return out


def join(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return [(torch.cat([ka, kb], 2), torch.cat([va, vb], 2)) for (ka, va), (kb, vb) in zip(a, b)]


def label_scores(model, hidden, labels):
    """Logits of label ids [B, K] from hidden states [B, P, H] (before the final norm):
    [B, P, K]."""
    h = model.model.norm(hidden)
    w = model.model.embed_tokens.weight[labels]  # [B, K, H]: tied with the LM head
    return torch.einsum("bph,bkh->bpk", h, w)


def forward_group(model, b, tap=()):
    """Hidden states of one batch (see batches.py): `pooled` [S, L] or None (items alone from
    position 0), `tail` [1, T] or None at positions tail_start.., `users` [B, U] right-padded
    at positions user_start.., `last` [B, P] the user-part tokens whose final states are
    returned. Returns a dict: `users` [B, P, H]; `pooled`, `tail`: final states [S, L, H],
    [1, T, H] or None; `*_tap`: {n: the residual after n layers} for n in `tap`."""
    out, ctx, lead = {}, None, b.get("lead")
    at = 0 if lead is None else lead.shape[1]  # where the pooled run starts
    if b["pooled"] is not None:
        ids = b["pooled"]
        pos = at + torch.arange(ids.shape[1]).expand_as(ids)
        if POOLED_POS == "true":  # segment j (all of one length) starts at token j * length
            pos = pos + (torch.arange(ids.shape[0]) * ids.shape[1])[:, None]
        out["pooled"], kvs, out["pooled_tap"] = run_part(model, ids, pos, tap=tap)
        out["pooled_kv"] = kvs
        ctx = flat(kvs)
    if lead is not None:  # each row's profile, then the pooled run it shares
        pos = torch.arange(at).expand_as(lead)
        _, kvs, _ = run_part(model, lead, pos)
        n = lead.shape[0]
        ctx = kvs if ctx is None else [(torch.cat([kl, kp.expand(n, -1, -1, -1)], 2),
                                        torch.cat([vl, vp.expand(n, -1, -1, -1)], 2))
                                       for (kl, vl), (kp, vp) in zip(kvs, ctx)]
    if b["tail"] is not None:
        start = b["tail_start"]
        pos = torch.arange(start, start + b["tail"].shape[1])[None]
        out["tail"], kvs, out["tail_tap"] = run_part(model, b["tail"], pos, ctx, tap=tap)
        out["tail_kv"] = kvs
        ctx = join(ctx, kvs)
    users, start = b["users"], b["user_start"]
    pos = torch.arange(start, start + users.shape[1]).expand_as(users)
    out["users"], out["users_kv"], out["users_tap"] = run_part(model, users, pos, ctx,
                                                               b["last"], tap=tap)
    return out


def readout_logits(model, b, out, tap):
    """The last layer's last head (the readout) at each user's final token: its attention
    logits over the prompt's item ends, in label order, [B, K]. `tap`: the residual stream at
    the last layer's input (`users_tap[layers - 1]`). A direct handle on which item the
    readout picks, for a loss of its own."""
    layer = model.model.layers[-1]
    a = layer.self_attn
    d = a.head_dim
    heads = a.q_proj.weight.shape[0] // d
    h = heads - 1
    kvh = h // (heads // (a.k_proj.weight.shape[0] // d))  # its key/value head (GQA)
    rows = torch.arange(b["users"].shape[0])
    final = b["last"][:, -1]
    q = a.q_proj(layer.input_layernorm(tap[rows, final])).view(len(rows), -1, d)[:, h]
    pos = (b["user_start"] + final)[:, None]
    cos, sin = model.model.rotary_emb(q[:, None], pos)
    q, _ = apply_rotary_pos_emb(q[:, None, None], q[:, None, None], cos, sin)
    q = q[:, 0, 0]  # [B, d]
    # user-first: item ends are in the rows
    if b["pooled"] is None and b["tail"] is None and b.get("lead") is None:
        k = out["users_kv"][-1][0][:, kvh]  # [B, U, d]
        keys = k[rows[:, None], b["last"][:, :-1]]  # [B, K, d]
        return torch.einsum("bd,bkd->bk", q, keys) * a.scaling
    parts = []
    if b["pooled"] is not None:
        parts.append(out["pooled_kv"][-1][0][:, kvh, -1])
    if b.get("lead") is not None:  # aup: the other items are in each row, after the run
        own = out["users_kv"][-1][0][:, kvh][:, b["tail_ends"]]  # [B, K', d]
        keys = torch.cat([p[None].expand(len(rows), -1, -1) for p in parts] + [own], 1)
        return torch.einsum("bd,bkd->bk", q, keys) * a.scaling
    if b["tail"] is not None:
        parts.append(out["tail_kv"][-1][0][0, kvh][b["tail_ends"]])
    keys = torch.cat(parts)  # [K, d], the labels' order (pooled items first, then the tail)
    return q @ keys.T * a.scaling


def hf_reference(model, tokens, segments, labels):
    """Label logits at the last position by the HF model itself: `segments` (start, len, at)
    are pooled items (positions restart at `at`, no attention outside the segment)."""
    n = len(tokens)
    pos = torch.arange(n)
    allowed = torch.ones(n, n).tril().bool()
    for start, length, at in segments:
        if POOLED_POS != "true":
            pos[start:start + length] = at + torch.arange(length)
        allowed[start:start + length, :start] = False
    mask = torch.zeros(1, 1, n, n)
    mask[0, 0][~allowed] = torch.finfo(torch.float32).min
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens]), position_ids=pos[None],
                       attention_mask=mask).logits[0, -1]
    return logits[labels]


def flatten(b):
    """The first user's prompt of a batch as one token list, with its pooled segments
    (start, len, first position): the input of `hf_reference`, i.e. what vLLM is sent."""
    tokens, segments = [], []
    if b.get("lead") is not None:
        tokens += b["lead"][0].tolist()
    at = len(tokens)
    if b["pooled"] is not None:
        for row in b["pooled"].tolist():
            segments.append((len(tokens), len(row), at))
            tokens += row
    if b["tail"] is not None:
        tokens += b["tail"][0].tolist()
    tokens += b["users"][0, :int(b["last"][0, -1]) + 1].tolist()
    return tokens, segments
