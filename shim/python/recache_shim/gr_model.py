"""A random-weight Qwen2 in plain PyTorch with a paged KV cache in vLLM 0.32's FlashAttention
layout, for the GR replay (``gr_replay``): what a serving engine computes for a batch of
prefills, without vLLM. Weights are random (the replay measures time, not answers); shapes are
the model's (``SHAPES``).

The cache is one tensor per layer ``[blocks, block_size, kv_heads, 2*D]`` (LBNHC: K in the
first ``D`` of each head's content, V in the second), so the K and V views are exactly those
``paged_kv.kv_views`` takes from vLLM and recache's scatter kernel writes. A prefill step
writes its new tokens' K/V into the cache through the slot mapping and attends each request's
new tokens to its whole context (cached, loaded and new) gathered by its block table.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    theta: float = 1e6

    def kv_token_bytes(self, dtype=torch.bfloat16) -> int:
        size = torch.empty(0, dtype=dtype).element_size()
        return 2 * self.layers * self.kv_heads * self.head_dim * size

    def linear_flops(self, tokens: int) -> float:
        """Multiply-adds x2 of the projections and MLP for ``tokens`` tokens."""
        h, d = self.hidden, self.head_dim
        per = h * (self.heads + 2 * self.kv_heads) * d + self.heads * d * h + 3 * h * self.ffn
        return 2.0 * per * self.layers * tokens

    def attn_flops(self, new: int, ctx: int) -> float:
        """QK^T and PV for ``new`` queries over a context of ``ctx`` (causal, at its end)."""
        pairs = new * ctx - new * (new - 1) / 2
        return 4.0 * pairs * self.heads * self.head_dim * self.layers


SHAPES = {
    "qwen2-1.5b": Shape(151936, 1536, 28, 12, 2, 128, 8960),
    "qwen2-7b": Shape(152064, 3584, 28, 28, 4, 128, 18944),
    "tiny": Shape(512, 64, 2, 4, 2, 16, 128),  # CPU tests
}


def _rms(x, w, eps=1e-6):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + eps)).to(x.dtype) * w


class Model:
    def __init__(self, shape: Shape, device, dtype=torch.bfloat16, seed: int = 0):
        self.s, self.device, self.dtype = shape, torch.device(device), dtype
        g = torch.Generator(device="cpu").manual_seed(seed)
        h, d, s = shape.hidden, shape.head_dim, shape

        def w(*dims):  # made on CPU (one seed everywhere), then moved
            return (torch.randn(*dims, generator=g) * 0.02).to(self.device, dtype)

        self.embed = w(s.vocab, h)
        qkv = (s.heads + 2 * s.kv_heads) * d
        self.layers = [dict(ln1=torch.ones(h, device=self.device, dtype=dtype),
                            wqkv=w(h, qkv), bqkv=w(qkv), wo=w(s.heads * d, h),
                            ln2=torch.ones(h, device=self.device, dtype=dtype),
                            wgu=w(h, 2 * s.ffn), wd=w(s.ffn, h)) for _ in range(s.layers)]
        self.norm = torch.ones(h, device=self.device, dtype=dtype)
        inv = 1.0 / (s.theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        self.inv_freq = inv.float().to(self.device)

    def cache(self, num_blocks: int, block: int) -> list[torch.Tensor]:
        """One ``[blocks, block, kv_heads, 2*D]`` tensor per layer."""
        s = self.s
        return [torch.zeros(num_blocks, block, s.kv_heads, 2 * s.head_dim, device=self.device,
                            dtype=self.dtype) for _ in range(s.layers)]

    def kv(self, layer_cache: torch.Tensor):
        d = self.s.head_dim
        return layer_cache[..., :d], layer_cache[..., d:]

    def _rope(self, x, pos):
        """NeoX rotation of ``x`` [T, heads, D] at positions ``pos`` [T]."""
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        half = x.shape[-1] // 2
        a, b = x[..., :half].float(), x[..., half:].float()
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1).to(x.dtype)

    @torch.no_grad()
    def prefill(self, caches, steps, tokens, wait_layer=None):
        """Computes each step's new tokens against its context. ``steps``: (new tokens, context
        length, block table) per request; ``tokens`` [T] their new token ids, requests in order.
        ``wait_layer(l)`` is called before layer ``l`` reads the cache (loads on a side stream).
        Returns the last token's log-probs per request [B, vocab]."""
        s, dev = self.s, self.device
        block = caches[0].shape[1]
        pos, slots, spans, start = [], [], [], 0
        for new, ctx, table in steps:
            p = torch.arange(ctx - new, ctx)
            t = torch.tensor(table, dtype=torch.long)
            pos.append(p)
            slots.append(t[p // block] * block + p % block)
            spans.append((start, new, ctx, t.to(dev)))
            start += new
        pos = torch.cat(pos).to(dev)
        slots = torch.cat(slots).to(dev)
        masks = [torch.ones(n, c, dtype=torch.bool, device=dev).tril(c - n)
                 for _, n, c, _ in spans]
        x = self.embed[tokens.to(dev)]
        d, hq, hk = s.head_dim, s.heads, s.kv_heads
        for li, lw in enumerate(self.layers):
            h = _rms(x, lw["ln1"])
            qkv = h @ lw["wqkv"] + lw["bqkv"]
            q, k, v = qkv.split([hq * d, hk * d, hk * d], -1)
            q = self._rope(q.view(-1, hq, d), pos)
            k = self._rope(k.view(-1, hk, d), pos)
            if wait_layer is not None:
                wait_layer(li)
            kc, vc = self.kv(caches[li])
            flat = caches[li].view(-1, hk, 2 * d)
            flat.index_copy_(0, slots, torch.cat([k, v.view(-1, hk, d)], -1))
            outs = []
            for (st, n, c, t), m in zip(spans, masks):
                kk = kc[t].reshape(-1, hk, d)[:c].transpose(0, 1)
                vv = vc[t].reshape(-1, hk, d)[:c].transpose(0, 1)
                qq = q[st:st + n].transpose(0, 1)
                if hq != hk:
                    kk = kk.repeat_interleave(hq // hk, 0)
                    vv = vv.repeat_interleave(hq // hk, 0)
                o = F.scaled_dot_product_attention(qq[None], kk[None], vv[None], attn_mask=m)
                outs.append(o[0].transpose(0, 1).reshape(n, hq * d))
            x = x + torch.cat(outs) @ lw["wo"]
            gu = _rms(x, lw["ln2"]) @ lw["wgu"]
            g, u = gu.chunk(2, -1)
            x = x + (F.silu(g) * u) @ lw["wd"]
        last = torch.tensor([st + n - 1 for st, n, _, _ in spans], device=dev)
        return torch.log_softmax((_rms(x[last], self.norm) @ self.embed.T).float(), -1)

    @torch.no_grad()
    def alone(self, ids: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """K and V ``[m, n, kv_heads, D]`` per layer of ``m`` prompts of ``n`` tokens each
        computed alone from position 0 (the pool's precompute: one batched causal attention
        instead of a call per item)."""
        s, dev = self.s, self.device
        m, n = ids.shape
        d, hq, hk = s.head_dim, s.heads, s.kv_heads
        pos = torch.arange(n, device=dev).repeat(m)
        x = self.embed[ids.reshape(-1).to(dev)]
        out = []
        for lw in self.layers:
            h = _rms(x, lw["ln1"])
            q, k, v = (h @ lw["wqkv"] + lw["bqkv"]).split([hq * d, hk * d, hk * d], -1)
            q = self._rope(q.view(-1, hq, d), pos).view(m, n, hq, d)
            k = self._rope(k.view(-1, hk, d), pos).view(m, n, hk, d)
            v = v.view(m, n, hk, d)
            out.append((k, v))
            kk, vv = k.transpose(1, 2), v.transpose(1, 2)
            if hq != hk:
                kk, vv = kk.repeat_interleave(hq // hk, 1), vv.repeat_interleave(hq // hk, 1)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, is_causal=True)
            x = x + o.transpose(1, 2).reshape(m * n, hq * d) @ lw["wo"]
            g, u = (_rms(x, lw["ln2"]) @ lw["wgu"]).chunk(2, -1)
            x = x + (F.silu(g) * u) @ lw["wd"]
        return out
