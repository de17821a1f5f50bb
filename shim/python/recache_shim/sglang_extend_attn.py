"""Attention after a cached prefix on SGLang 0.5.23's CPU engine, at the cost of the new tokens.

SGLang's ``torch_native`` backend (the CPU engine's) computes an extend by padding the new
queries to the whole sequence (``per_req_query_redudant``) and running causal attention over all
of it, so a request whose first P tokens come from the radix cache or recache's item pool still
pays the P x P triangle of attention it does not use: a prompt with 1,900 of its 3,300 tokens
loaded cost 0.74x of computing it whole (measured on the testbed; its linear work is 0.42x).
``install()`` replaces that method with one that attends only the E new queries: to the P
cached keys (no mask) and to the E new ones (causal), both with the CPU flash kernel, merged by
their log-sum-exps (the same result within bf16; one 1,400-query layer over a 1,900-token
prefix: 7.9 ms against 11.9 ms for the padded causal pass and 11.5 ms for an E x S mask). On
the testbed the pooled prompt above then costs 0.63-0.66x of the whole one (68.6 ms against
88 ms before); pooled scores still match the layout reference (0.0065 nats). Sliding windows
and cross attention keep SGLang's own path.

Installed by the item pool's linker (``sglang_item_pool``) in SGLang's scheduler process; the
linker config's ``"extend_attention": false`` leaves SGLang's path.
"""

from __future__ import annotations

import logging

import torch
from torch.nn.functional import scaled_dot_product_attention

logger = logging.getLogger("recache_shim.sglang_extend_attn")


def _flash(q, k, v, causal, scale):
    """(output, log-sum-exp) of one attention; [1, heads, n, dim] each."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, k, v, 0.0, causal, scale=scale)[:2]
    return out.float(), lse


def attend_after_prefix(q, k, v, prefix: int, scale):
    """Causal attention of the new queries ``q`` [1, H, E, D] over ``k``/``v`` [1, H, P+E, D]
    (the first ``prefix`` keys cached): the prefix block (E x P, no mask) and the new block
    (E x E, causal) with CPU flash attention, merged by their log-sum-exps. No E x S mask is
    materialised (SGLang's masked path was no faster than its padded one)."""
    o1, l1 = _flash(q, k[:, :, :prefix], v[:, :, :prefix], False, scale)
    o2, l2 = _flash(q, k[:, :, prefix:], v[:, :, prefix:], True, scale)
    top = torch.maximum(l1, l2)
    w1, w2 = torch.exp(l1 - top).unsqueeze(-1), torch.exp(l2 - top).unsqueeze(-1)
    return ((o1 * w1 + o2 * w2) / (w1 + w2)).to(q.dtype)


def extend_only(query, output, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens,
                extend_prefix_lens, extend_seq_lens, scaling=None, enable_gqa=False,
                causal=False):
    """SGLang's ``_run_sdpa_forward_extend`` without the padded prefix queries."""
    q_all = query.movedim(0, query.dim() - 2)  # [heads, tokens, dim]
    start_q = 0
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    for i in range(seq_lens.shape[0]):
        n_q, prefix, n_kv = int(extend_seq_lens[i]), int(extend_prefix_lens[i]), int(seq_lens[i])
        end_q = start_q + n_q
        q = q_all[:, start_q:end_q, :].unsqueeze(0)
        slots = req_to_token[req_pool_indices[i], :n_kv]
        k = k_cache[slots].movedim(0, query.dim() - 2).to(q.dtype).unsqueeze(0)
        v = v_cache[slots].movedim(0, query.dim() - 2).to(q.dtype).unsqueeze(0)
        if causal and prefix > 0:
            if enable_gqa and k.shape[1] != q.shape[1]:
                rep = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
            out = attend_after_prefix(q, k, v, prefix, scale)
        else:
            out = scaled_dot_product_attention(q, k, v, enable_gqa=enable_gqa, scale=scaling,
                                               is_causal=causal)
        output[start_q:end_q] = out.squeeze(0).movedim(query.dim() - 2, 0)
        start_q = end_q
    return output


def install() -> bool:
    """Patches ``TorchNativeAttnBackend._run_sdpa_forward_extend`` once; True when it took."""
    try:
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    except Exception as e:  # another SGLang layout: leave it
        logger.warning("recache: SGLang's torch_native backend not found (%s); extend "
                       "attention left as it is", e)
        return False
    if getattr(TorchNativeAttnBackend, "_recache_extend_only", False):
        return True
    original = TorchNativeAttnBackend._run_sdpa_forward_extend

    def run(self, query, output, k_cache, v_cache, req_to_token, req_pool_indices, seq_lens,
            extend_prefix_lens, extend_seq_lens, encoder_lens=None, scaling=None,
            enable_gqa=False, causal=False, is_cross_attn=False, sliding_window_size=None):
        if encoder_lens is not None or is_cross_attn or (
                sliding_window_size is not None and sliding_window_size > -1):
            return original(self, query, output, k_cache, v_cache, req_to_token,
                            req_pool_indices, seq_lens, extend_prefix_lens, extend_seq_lens,
                            encoder_lens=encoder_lens, scaling=scaling, enable_gqa=enable_gqa,
                            causal=causal, is_cross_attn=is_cross_attn,
                            sliding_window_size=sliding_window_size)
        return extend_only(query, output, k_cache, v_cache, req_to_token, req_pool_indices,
                           seq_lens, extend_prefix_lens, extend_seq_lens, scaling=scaling,
                           enable_gqa=enable_gqa, causal=causal)

    TorchNativeAttnBackend._run_sdpa_forward_extend = run
    TorchNativeAttnBackend._recache_original = original
    TorchNativeAttnBackend._recache_extend_only = True
    logger.info("recache: SGLang's CPU extend attends only the new tokens")
    return True
