"""Weights built by hand rather than learnt (issue 21): the label channel (a frozen positional
head in layer 0 that copies each candidate's label into its item's last token, and a readout
head in the last layer that copies the preferred item's label to the output) and the
experimental item channel and end flag (a fitted RoPE window over each item's title, readout
score rows, a flag only item ends carry). `train.py` calls these on a fresh model.
"""

import torch
import torch.nn.functional as F

from . import layout


def label_channel(model, hp, used):
    """Builds the copy half of the pointer task into the weights and keeps it there; returns
    {parameter: mask} for the gradients (0 = frozen). The last `head_dim` dims of the residual
    stream are a label channel: only label-range ids write there (fixed random vectors with a
    constant flag dim), every other head's and every MLP's output into it is zero and stays
    zero, and the last attention head of two layers uses it:
    - layer 0: a positional head (q and k from their biases alone, RoPE phases set so the
      score peaks `item_tokens` tokens back) copies the label token into the last token of
      the item it introduces: in every layout, pooled segments included, an item's last token
      is exactly `item_tokens` after its label;
    - the last layer: the final token's query meets the flag (it looks at item ends) plus what
      it learns (which item the user prefers) and copies the channel to the output, where the
      tied unembedding reads it as that item's label.
    Measured without it (the earlier copy-initialised heads): the main cross-entropy stays at
    log(100) and dev Recall@10 at chance; gradient descent does not find a copy of arbitrary
    label ids in this CPU budget. Label ids that are also text tokens (LABEL_BASE=256 overlaps
    the tokenizer's merges) carry the channel as text too; the last layer's learnt key must
    discount those positions."""
    cfg = model.config
    hidden, heads = cfg.hidden_size, cfg.num_attention_heads
    assert cfg.num_key_value_heads == heads, "label channel: one KV head per head"
    d = hidden // heads
    ch = slice(hidden - d, hidden)  # the channel's residual dims
    hs = slice((heads - 1) * d, heads * d)  # the last head's rows in q/k/v, columns in o
    flag = hidden - d
    half = d // 2
    gen = torch.Generator().manual_seed(hp["seed"] + 7)
    masks = {}

    def mask(p):
        if p not in masks:
            masks[p] = torch.ones_like(p)
        return masks[p]

    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        # Label rows: channel vectors at the scale of the text dims (init std 0.02). Ids that
        # are also text tokens bring their channel vector wherever they occur as text, e.g. as
        # an item's last token; the copy (normalized by RMSNorm, then `copy_scale`) outweighs
        # that 5-7x. Label ids no text uses get no text dims: copied at full strength.
        text = torch.zeros(emb.shape[0], dtype=torch.bool)
        text[hp["text_ids"]] = True
        emb[:, ch] = 0
        base = hp["label_base"]
        lab = hp["label_sigma"] * torch.randn(used - base, d, generator=gen)
        lab[:, 0] = hp["label_flag"] * hp["label_sigma"]
        end = hidden - 1  # hp end_flag: the channel's last dim flags item ends alone
        if hp["end_flag"]:
            lab[:, -1] = 0
            # What layer 0's copy head reads as a pure label's flag (its input RMS norm).
            seen = (lab[:, 0] / (lab.pow(2).sum(1) / hidden).sqrt()).mean()
            hp["end_seen"] = float(seen)
        emb[base:used, ch] = lab
        pure = torch.zeros(emb.shape[0], dtype=torch.bool)
        pure[base:used] = True
        pure &= ~text
        emb[pure, :hidden - d] = 0
        mask(emb)[:, ch] = 0
        mask(emb)[pure] = 0
        # The unembedding reads the channel through the final norm: start it loud enough for
        # label logits to spread (trainable).
        model.model.norm.weight[ch] = hp["out_gain"]
        # RoPE frequencies of one head (config: rope_theta 10000; HF pairs dim i with i + d/2).
        theta = 10000.0 ** (-torch.arange(half, dtype=torch.float32) * 2 / d)
        back = hp["item_tokens"]
        for n, layer in enumerate(model.model.layers):
            a, mlp = layer.self_attn, layer.mlp
            a.o_proj.weight[ch] = 0
            mask(a.o_proj.weight)[ch] = 0
            mlp.down_proj.weight[ch] = 0
            mask(mlp.down_proj.weight)[ch] = 0
            if n == 0:  # the positional copy head: frozen whole
                for lin in (a.q_proj, a.k_proj, a.v_proj):
                    lin.weight[hs] = 0
                    lin.bias[hs] = 0
                    mask(lin.weight)[hs] = 0
                    mask(lin.bias)[hs] = 0
                amp = torch.zeros(half)
                amp[:hp["copy_freqs"]] = (hp["copy_gain"] / hp["copy_freqs"]) ** 0.5
                kb, qb = torch.zeros(d), torch.zeros(d)
                kb[:half] = amp
                # q = R(-back) k: (R_m q).(R_n k) = sum amp^2 cos(theta (n - m + back))
                qb[:half] = amp * torch.cos(-back * theta)
                qb[half:] = amp * torch.sin(-back * theta)
                if hp["end_flag"]:
                    # Refitted so that a token with no token `item_tokens` back (the first
                    # 18 of a pooled segment or of an item-first tail) attends to itself, not
                    # to its label `p` back: only item ends get the end flag.
                    pa, pb = copy_phases(hp, d, theta, a.scaling, amp)
                    r = (pa ** 2 + pb ** 2).sqrt() + 1e-12
                    kappa = (r / a.scaling).sqrt()
                    kb = torch.zeros(d)
                    kb[:half] = kappa
                    qb = torch.cat([pa / (kappa * a.scaling), -pb / (kappa * a.scaling)])
                a.k_proj.bias[hs] = kb
                a.q_proj.bias[hs] = qb
                a.v_proj.weight[hs, ch] = torch.eye(d)
                a.o_proj.weight[:, hs] = 0
                a.o_proj.weight[ch, hs] = hp["copy_scale"] * torch.eye(d)
                if hp["end_flag"]:
                    # The end flag: the copied label's flag, written to a dim no embedding
                    # row has, so only a token `item_tokens` after a label (an item end, in
                    # every layout) holds it, at `end_flag` whatever the layout.
                    a.o_proj.weight[end, hs.start] = hp["end_flag"] / seen
                    model.model.layers[0].input_layernorm.weight[flag] = 1.0
                    mask(model.model.layers[0].input_layernorm.weight)[flag] = 0
                mask(a.o_proj.weight)[:, hs] = 0
            elif n == len(model.model.layers) - 1:  # the readout head: learns, starts as copy
                a.v_proj.weight[hs] = 0
                a.v_proj.bias[hs] = 0
                a.v_proj.weight[hs, ch] = torch.eye(d)
                a.o_proj.weight[ch, hs] = hp["read_scale"] * torch.eye(d)
                mask(a.o_proj.weight)[ch, hs] = 1
                rows = [hs.start + half - 1, hs.start + d - 1]  # the slowest RoPE pair
                a.k_proj.weight[rows] = 0
                a.k_proj.bias[rows] = 0
                a.k_proj.weight[rows[0], end if hp["end_flag"] else flag] = 1.0
                if hp["end_flag"]:  # the flag is not copied to the output (frozen)
                    a.v_proj.weight[hs.start + d - 1] = 0
                    mask(a.v_proj.weight)[hs.start + d - 1] = 0
                    # Measured on the H200 (run 5): with these learnt, training moved the
                    # readout's attention off the item ends (0% after 754 steps): frozen.
                    for lin in (a.q_proj, a.k_proj):
                        mask(lin.weight)[rows] = 0
                        mask(lin.bias)[rows] = 0
                    mask(layer.input_layernorm.weight)[end] = 0
                if hp.get("read_frozen"):
                    # The copy itself frozen (value = the item end's label code, output =
                    # read_scale x it, the norms' channel weights): learnt, they may mix a
                    # component shared by all item ends into the copy, which the
                    # unembedding reads as noise across labels.
                    for p in (a.v_proj.weight, a.v_proj.bias):
                        mask(p)[hs] = 0
                    mask(a.o_proj.weight)[:, hs] = 0
                    mask(model.model.norm.weight)[ch] = 0
                    mask(layer.input_layernorm.weight)[ch] = 0
                a.q_proj.weight[rows] = 0
                a.q_proj.bias[rows] = 0
                a.q_proj.bias[rows[0]] = hp["read_gain"]
    return masks


def window_phases(hp, d, theta):
    """Logit of a RoPE head whose q and k are biases alone, as a function of how many tokens
    back the key is: sum_i a_i cos(theta_i t) + b_i sin(theta_i t). (a, b) fitted (a seeded,
    deterministic Adam in float64) so that the `item_tokens` tokens ending at the query (t in
    0..item_tokens-1: an item end's own title) take all the attention, weighted exp(-bag_decay
    * t) among themselves, against every other key up to `window_reach` tokens back (the label
    at t = item_tokens included)."""
    half, w = d // 2, hp["item_tokens"]
    t = torch.arange(hp["window_reach"], dtype=torch.float64)
    th = theta.double()
    cos, sin = torch.cos(t[:, None] * th), torch.sin(t[:, None] * th)
    target = torch.log_softmax(-hp["bag_decay"] * torch.arange(w, dtype=torch.float64), 0)
    a = torch.zeros(half, dtype=torch.float64)
    a[:8] = 5.0
    b = torch.zeros(half, dtype=torch.float64)
    a.requires_grad_(True)
    b.requires_grad_(True)
    opt = torch.optim.Adam([a, b], lr=0.05)
    for _ in range(hp["window_iters"]):
        s = cos @ a + sin @ b
        inside = torch.log_softmax(s[:w], 0)
        loss = (F.softplus(torch.logsumexp(s[w:], 0) - torch.logsumexp(s[:w], 0) + 14) +
                3 * (inside.exp() * (inside - target)).sum() + 1e-5 * (a * a + b * b).sum())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return a.detach().float(), b.detach().float()


def copy_phases(hp, d, theta, scaling, amp):
    """The copy head's logit as a function of how far back the key is (as `window_phases`),
    refitted from label_channel's (a peak `item_tokens` back) so that it keeps that peak
    against every other key up to `window_reach` back and, in addition, the key at distance
    0 (the token itself) beats distances 1..item_tokens-1 by 10 nats: with nothing
    `item_tokens` back a token copies itself rather than the label of its own segment."""
    half, back = d // 2, hp["item_tokens"]
    t = torch.arange(hp["window_reach"], dtype=torch.float64)
    th = theta.double()
    cos, sin = torch.cos(t[:, None] * th), torch.sin(t[:, None] * th)
    g = scaling * amp.double() ** 2
    a = (g * torch.cos(back * th)).requires_grad_(True)
    b = (g * torch.sin(back * th)).requires_grad_(True)
    other = torch.ones(len(t), dtype=torch.bool)
    other[back] = False
    opt = torch.optim.Adam([a, b], lr=0.05)
    with torch.enable_grad():  # label_channel builds under no_grad
        for _ in range(hp["window_iters"]):
            s = cos @ a + sin @ b
            loss = (F.softplus(torch.logsumexp(s[other], 0) - s[back] + 14) +
                    F.softplus(torch.logsumexp(s[1:back], 0) - s[0] + 10) +
                    1e-5 * (a * a + b * b).sum())
            opt.zero_grad()
            loss.backward()
            opt.step()
    return a.detach().float(), b.detach().float()


def item_channel(model, hp, masks):
    """The comparison's item half, built like the label channel (issue 21: learnt title
    vectors did not survive served layouts). Residual dims `it` (the `item_dims` just below
    the label channel) are an item channel: only layer 0 writes there, so what an item end
    holds in it is a function of its own title tokens alone, in every layout:
    - layer 0's first head is a positional window: q and k from their biases alone, RoPE
      phases fitted (`window_phases`) so that each token attends to itself and the 17 tokens
      before it and to nothing else; its value is learnt (from the token embeddings), its
      output goes to the item channel only. At an item end that window is exactly the item's
      title, whatever comes before it (pooled segments, other items, the profile);
    - layer 0's MLP (learnt, blind to the label channel) writes a nonlinear function of that
      bag into the item channel too;
    - no other head or MLP writes there (masked), and no embedding row has item dims.
    With hp `end_gate` (`end_gate` below) the channel is gated to item ends.
    The readout head (last layer, last head) then scores item ends by a learnt bilinear form
    on a few of its slowest RoPE pairs (`score_pairs`, the nearest to position-free): k from
    the item channel only, q from the final token (learnt), next to the label flag that makes
    it look at item ends. Every other q/k row of the readout is zero and frozen."""
    cfg = model.config
    hidden, heads = cfg.hidden_size, cfg.num_attention_heads
    d = hidden // heads
    half = d // 2
    it = slice(hidden - d - hp["item_dims"], hidden - d)
    ch = slice(hidden - d, hidden)
    h0 = slice(0, d)  # layer 0's first head: the window
    hs = slice((heads - 1) * d, heads * d)  # the readout head
    gen = torch.Generator().manual_seed(hp["seed"] + 11)

    def mask(p):
        if p not in masks:
            masks[p] = torch.ones_like(p)
        return masks[p]

    theta = 10000.0 ** (-torch.arange(half, dtype=torch.float32) * 2 / d)
    pa, pb = window_phases(hp, d, theta)
    layers = model.model.layers
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb[:, it] = 0
        mask(emb)[:, it] = 0
        for n, layer in enumerate(layers):
            a, mlp = layer.self_attn, layer.mlp
            a.o_proj.weight[it] = 0
            mask(a.o_proj.weight)[it] = 0
            mlp.down_proj.weight[it] = 0
            mask(mlp.down_proj.weight)[it] = 0
        for layer in layers[1:-1] if hp["mid_frozen"] else ():
            # No writes between layer 0 and the readout: the residual there keeps layer 0's
            # scale, so the label flag is not normalized away (measured: the learnt middle
            # layers grew the text dims at item ends to RMS 50 against a flag of 0.16).
            for w in (layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight):
                w.zero_()
                mask(w).zero_()
        a, mlp = layers[0].self_attn, layers[0].mlp
        # The window head: logit(t) = scaling * q . R(t) k; with k = (kappa, 0) per RoPE pair,
        # q . R(t) k = kappa (q1 cos(theta t) - q2 sin(theta t)).
        r = (pa ** 2 + pb ** 2).sqrt() + 1e-12
        kappa = (r / a.scaling).sqrt()
        for lin in (a.q_proj, a.k_proj):
            lin.weight[h0] = 0
            lin.bias[h0] = 0
            mask(lin.weight)[h0] = 0
            mask(lin.bias)[h0] = 0
        a.k_proj.bias[:half] = kappa
        a.q_proj.bias[:half] = pa / (kappa * a.scaling)
        a.q_proj.bias[half:d] = -pb / (kappa * a.scaling)
        a.o_proj.weight[:, h0] = 0
        mask(a.o_proj.weight)[:, h0] = 0
        a.o_proj.weight[it, h0] = 0.1 * torch.randn(hp["item_dims"], d, generator=gen)
        mask(a.o_proj.weight)[it, h0] = 1
        if hp["end_flag"]:
            # A label inside a token's own window means it is not an item end (the label is 18
            # back from an end, outside its window): the window's last value row reads the
            # label flag and takes a multiple of it off the end flag. Without it the tokens
            # of a pooled segment shorter than 18 (the label at position 0 included) copy
            # their label's flag too (`copy_phases` keeps the others from copying it): the
            # label at the start of a pooled segment or of an item-first tail, which copies
            # itself. 3x: a window all label cancels the flag three times over.
            e, f = hidden - 1, hidden - d
            a.v_proj.weight[d - 1] = 0
            a.v_proj.bias[d - 1] = 0
            a.v_proj.weight[d - 1, f] = 1.0
            mask(a.v_proj.weight)[d - 1] = 0
            mask(a.v_proj.bias)[d - 1] = 0
            a.o_proj.weight[:, d - 1] = 0
            mask(a.o_proj.weight)[:, d - 1] = 0
            seen = a.o_proj.weight.new_tensor(hp["end_seen"])
            a.o_proj.weight[e, d - 1] = -3.0 * hp["end_flag"] / seen
        mlp.down_proj.weight[it] = 0.02 * torch.randn(hp["item_dims"], mlp.down_proj.weight.shape[1],
                                                      generator=gen)
        mask(mlp.down_proj.weight)[it] = 1
        for lin in (mlp.gate_proj, mlp.up_proj):
            lin.weight[:, ch] = 0
            mask(lin.weight)[:, ch] = 0
        if hp.get("end_gate"):
            end_gate(model, hp, masks, it, gen)
        # The readout: flag on the slowest pair (label_channel), the score on the next ones.
        a = layers[-1].self_attn
        score = [hs.start + half - 2 - j for j in range(hp["score_pairs"])]
        keep = {hs.start + half - 1} | set(score)
        free = [r for r in range(hs.start, hs.stop) if r not in keep]
        for lin in (a.q_proj, a.k_proj):
            lin.weight[free] = 0
            lin.bias[free] = 0
            mask(lin.weight)[free] = 0
            mask(lin.bias)[free] = 0
        a.k_proj.weight[score] = 0
        a.k_proj.bias[score] = 0
        mask(a.k_proj.bias)[score] = 0
        mask(a.k_proj.weight)[score] = 0
        a.k_proj.weight[score, it] = 0.3 * torch.randn(len(score), hp["item_dims"],
                                                       generator=gen)
        mask(a.k_proj.weight)[score, it] = 1
        a.q_proj.weight[score] = 0
        a.q_proj.bias[score] = hp["score_gain"]
    return it


def end_gate(model, hp, masks, it, gen):
    """hp `end_gate` > 0 (issue 21, fifth session): the item channel is zero off item ends, so
    the readout's score key (which reads it) cannot pull the attention off them however sharp
    it is. The window head writes its bag into `raw` (the `item_dims` below the item channel,
    written by nothing else); the item channel is written only by the last `item_dims` units
    of layer 0's MLP, each silu(end_gate * end flag) * (a learnt linear read of `raw`): the end
    flag is 0 or negative off item ends (the window takes a label's flag off) and silu(x) is 0
    at 0 and ~0 far below it, so those units write (almost) nothing there. `end_gate` must be
    large (e.g. 30): a token of small RMS with a flag of -0.02 has a normalized flag of ~-0.6,
    which silu(-0.6) would let through. (The cost: the channel is a linear function of the
    title's bag, at ends scaled by the flag's gate.) Needs text dims below `raw`: at hidden
    128, `item_dims` 16."""
    cfg = model.config
    hidden, heads = cfg.hidden_size, cfg.num_attention_heads
    d = hidden // heads
    n = hp["item_dims"]
    raw = slice(it.start - n, it.start)
    end = hidden - 1
    assert hp["end_flag"] and raw.start > 0, "end_gate: no text dims left below raw"

    def mask(p):
        if p not in masks:
            masks[p] = torch.ones_like(p)
        return masks[p]

    layers = model.model.layers
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb[:, raw] = 0
        mask(emb)[:, raw] = 0
        for layer in layers:
            for w in (layer.self_attn.o_proj.weight, layer.mlp.down_proj.weight):
                w[raw] = 0
                mask(w)[raw] = 0
        a, mlp = layers[0].self_attn, layers[0].mlp
        h0 = slice(0, d - 1)  # the window head's learnt value dims (d - 1: the flag fix)
        a.o_proj.weight[raw, h0] = a.o_proj.weight[it, h0]
        mask(a.o_proj.weight)[raw, h0] = 1
        a.o_proj.weight[it] = 0
        mask(a.o_proj.weight)[it] = 0
        units = slice(mlp.down_proj.weight.shape[1] - n, mlp.down_proj.weight.shape[1])
        mlp.down_proj.weight[it] = 0
        mask(mlp.down_proj.weight)[it] = 0
        mlp.down_proj.weight[:, units] = 0
        mask(mlp.down_proj.weight)[:, units] = 0
        mlp.down_proj.weight[it, units] = 0.3 / hp["end_gate"] * torch.eye(n)
        mask(mlp.down_proj.weight)[it, units] = 1
        mlp.gate_proj.weight[units] = 0
        mlp.gate_proj.weight[units, end] = hp["end_gate"]
        mask(mlp.gate_proj.weight)[units] = 0
        mlp.up_proj.weight[units] = 0
        mask(mlp.up_proj.weight)[units] = 0
        mlp.up_proj.weight[units, raw] = torch.eye(n) + 0.1 * torch.randn(n, n, generator=gen)
        mask(mlp.up_proj.weight)[units, raw] = 1
        norm = layers[0].post_attention_layernorm.weight
        norm[end] = 1.0
        mask(norm)[end] = 0
