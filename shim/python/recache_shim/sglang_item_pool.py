"""recache's item KV pool on SGLang 0.5.23: an external unified-cache linker.

Load it with (SGLang's CPU engine; docs/plan-sglang-pool.md holds the source reading)::

    --enable-unified-cache-external-linker --unified-cache-external-linker-backend dynamic
    --unified-cache-external-linker-config '{"linker": "RecacheItemLinker",
      "linker_module_path": "recache_shim.sglang_item_pool",
      "linker_extra_config": {"pool_bytes": 268435456}}'

Requests carry the same plan as on vLLM (``item_pool``'s docstring: ``fill``, ``segments``,
``evict``, ``list``), as ``sampling_params.custom_params.recache_pool`` (a JSON string, which
survives SGLang's IPC, or a dict); the finished request's report comes back as
``meta_info.recache_pool`` (a one-element list). The residency index (``SchedulerState``), the
store (``PoolStore``), the codecs and the RoPE re-rotation are the vLLM connector's; an entry
here keeps every layer's K and V in one tensor (``Stacked``), so a step's loads are one slice
an item and one gather in all, not one per layer and K/V.

How it maps onto the linker's calls: the linker only sees a request id and page hashes, so a
patch on the wrapper's ``match`` notes each request (its prompt, its plan, the engine's own
prefix hit) first. ``lookup`` claims the leading run of resident segments after that hit, with
the same token ids; ``load`` takes the request-private slots SGLang allocated for it;
``start_layer_wise_loading`` writes each layer's rows into ``k_buffer``/``v_buffer`` before the
forward. Everything that can fail runs in ``lookup``/``load``, which claim nothing (SGLang then
computes) rather than raise: an exception there stops SGLang's scheduler, and a failed layer
aborts every loading request of the batch. Fills and reports come from a patch on the radix
cache's ``on_release`` (every finished request, before its row is freed and its output sent):
a fill's rows are read from its slots. ``offload`` acknowledges every node so the tree never
offers it again (the pool fills from its own requests, not the tree's pages).

The cold tier (``linker_extra_config.store``, as the connector's ``store``: Redis or Mooncake
Store): segments recache lists in ``cold`` and this engine does not hold are read from the
store in ``lookup`` and claimed only when they came back whole; fills are written through
(``sglang_item_cold``). Reports carry the connector's store counts.

Serves only SGLang's CPU engine with one token a page, an unquantised ``MHATokenToKVPool``
(``nhd``) and tensor parallelism 1; anything else logs why once and claims nothing.
"""

from __future__ import annotations

import collections
import json
import logging
import time
from dataclasses import dataclass

import torch

from sglang.srt.mem_cache.hicache_storage import PoolName
from sglang.srt.mem_cache.unified_cache.unified_cache_linker import (
    LayerWiseLoadCounter,
    UnifiedCacheLinker,
    UnifiedCacheLinkerWrapper,
)

from . import item_codec
from .item_cold_loads import is_cold
from .item_pool_sched import SchedulerState
from .item_pool_store import PoolStore
from .paged_kv import RopeSpec, rope_shift
from .sglang_item_cold import SglangCold, served_name

logger = logging.getLogger("recache_shim.sglang_item_pool")
PARAMS = "recache_pool"
_ACTIVE: "RecacheItemLinker | None" = None
_MAX_NOTED = 4096  # requests noted but never released (aborted while waiting) stop here


def plan_of(req) -> dict | None:
    """The request's pool plan from ``custom_params`` (a JSON string or a dict), or None."""
    custom = getattr(getattr(req, "sampling_params", None), "custom_params", None)
    p = custom.get(PARAMS) if isinstance(custom, dict) else None
    if isinstance(p, str):
        try:
            p = json.loads(p)
        except ValueError:
            return None
    return p if isinstance(p, dict) else None


def _rope(server_args, head_dim: int) -> RopeSpec | None:
    try:
        from transformers import AutoConfig

        return RopeSpec.from_hf(AutoConfig.from_pretrained(server_args.model_path), head_dim)
    except Exception:  # an unusual config: no re-rotation, ``pos`` segments are refused
        return None


@dataclass
class Stacked:
    """One pooled item on SGLang: ``rows`` [n, layers, 2 (K, V), heads, dim] as the codec
    keeps them. Token-major, so the codecs' row slices cut every layer at once: with one
    tensor per layer and K/V (the vLLM connector's ``Entry``), a pooled request's ~100 items
    cost 2 x layers slices each and made the loads 12.8% of a saturated scheduler."""

    tokens: tuple[int, ...]
    rows: object

    @property
    def nbytes(self) -> int:
        return item_codec.nbytes(self.rows)


def shifted(k: torch.Tensor, parts, rope) -> torch.Tensor:
    """``k`` (the parts' rows in order) with each part re-rotated by its ``pos``."""
    if all(p == 0 for *_, p in parts):
        return k
    rows = k.split([n for _, _, n, _ in parts])
    return torch.cat([rope_shift(r, p, rope) if p else r for r, (*_, p) in zip(rows, parts)])


_MAX_RUNS = 16


def slot_runs(slots: torch.Tensor) -> list[tuple[int, int, int]] | None:
    """``slots`` as at most ``_MAX_RUNS`` ascending runs ``(first slot, offset, length)``, or
    None: SGLang's allocator hands out runs of its sorted free list, and a slice copy moves a
    run's rows ~4x faster than an indexed write (measured: 8 writes of 1,900 tiny-model rows,
    0.38 against 1.47 ms)."""
    if slots.numel() == 0:
        return []
    cuts = torch.nonzero(slots[1:] - slots[:-1] != 1).flatten()
    if cuts.numel() >= _MAX_RUNS:
        return None
    starts = [0] + [int(c) + 1 for c in cuts]
    ends = starts[1:] + [int(slots.numel())]
    return [(int(slots[a]), a, b - a) for a, b in zip(starts, ends)]


def _words(t: torch.Tensor) -> torch.Tensor:
    """A ``[n, heads, dim]`` tensor's rows as 8-byte words (an indexed write of int64 words
    runs ~2x faster than of bf16 elements), or ``t`` where its strides do not allow it."""
    try:
        return t.reshape(t.shape[0], -1).view(torch.int64) if t.dim() == 3 else t
    except RuntimeError:
        return t


def write_rows(buf: torch.Tensor, slots: torch.Tensor, runs, rows: torch.Tensor) -> None:
    """``buf[slots] = rows``, by slice copies where ``runs`` has them."""
    if runs is not None:
        for first, off, n in runs:
            buf[first:first + n].copy_(rows[off:off + n])
        return
    dst, src = _words(buf), _words(rows)
    if dst.dtype == src.dtype and dst.dim() == src.dim():
        dst[slots] = src
    else:
        buf[slots] = rows


class RecacheItemLinker(UnifiedCacheLinker):
    def __init__(self, server_args, params, *, components, extra_config, forward_stream=None):
        extra = dict(extra_config or {})
        self.forward_stream = forward_stream
        self.kv = params.token_to_kv_pool_allocator.get_kvcache()
        self.pools = {PoolName.KV: self.kv}
        self.layer_done_counter = LayerWiseLoadCounter(int(self.kv.layer_num))
        self.page = int(getattr(params, "page_size", 1) or 1)
        self.sched = SchedulerState(int(extra.get("pool_bytes", 256 << 20)))
        self.store = PoolStore()
        self.codec = str(extra.get("pool_codec", "bf16"))
        if self.codec not in item_codec.CODECS:
            raise ValueError(f"recache item pool: unknown pool_codec {self.codec!r} "
                             f"(one of {', '.join(item_codec.CODECS)})")
        self.rope = _rope(server_args, int(self.kv.head_dim))
        self.noted: collections.OrderedDict[str, tuple] = collections.OrderedDict()
        self.claims: dict[str, tuple] = {}  # rid -> (engine's hit, end, parts, their keys)
        self.pending: list[tuple[torch.Tensor, list]] = []  # (slots, parts) for the next step
        self.loaded: dict[str, int] = {}
        self.acks: collections.deque[bool] = collections.deque()
        self.disabled = self._why_not(server_args, components, extra)
        self.cold = SglangCold(None if self.disabled else extra.get("store"),
                               served_name(server_args), self.kv)
        if self.disabled:
            logger.warning("recache item pool disabled: %s", self.disabled)
        else:
            _install()
            if extra.get("extend_attention", True):
                from .sglang_extend_attn import install

                install()
            logger.info("recache item pool (SGLang linker): %d layers, %d heads x %d, %s, "
                        "pool %d bytes, codec %s, store %s", self.kv.layer_num,
                        self.kv.head_num, self.kv.head_dim, self.kv.dtype, self.sched.budget,
                        self.codec, "on" if self.cold.enabled else "off")
        global _ACTIVE
        _ACTIVE = None if self.disabled else self

    def _why_not(self, server_args, components, extra) -> str | None:
        kv = self.kv
        if {getattr(c, "name", str(c)) for c in components} != {"FULL"}:
            return f"components {sorted(map(str, components))}: full attention only"
        if type(kv).__name__ != "MHATokenToKVPool" or getattr(kv, "kv_cache_layout", "") != "nhd":
            return f"KV pool {type(kv).__name__} ({getattr(kv, 'kv_cache_layout', '?')}): " \
                   "an nhd MHATokenToKVPool only"
        if kv.store_dtype != kv.dtype or getattr(kv, "is_quantized_kv_cache", False):
            return "a quantised KV cache"
        if str(kv.device) != "cpu" or self.page != 1:
            return f"device {kv.device}, page {self.page}: the CPU engine, one token a page"
        if int(getattr(server_args, "tp_size", 1) or 1) != 1:
            return "tensor parallelism > 1"
        return None

    # ---- the scheduler's side: notes, claims, loads ----

    def note(self, req, device_hit_len: int) -> None:
        """Called from ``match`` before every lookup: what ``lookup`` cannot see."""
        rid = req.rid
        if rid not in self.noted:
            plan = plan_of(req)
            if plan and plan.get("evict"):
                self._evict(str(k) for k in plan["evict"])
            if plan and plan.get("clear"):
                self.sched.reset()
                self.store.entries.clear()
            while len(self.noted) >= _MAX_NOTED:
                self.cold.forget(self.noted.popitem(last=False)[0])
        else:
            plan = self.noted[rid][1]
        self.noted[rid] = (req, plan, int(device_hit_len))

    def _evict(self, keys) -> None:
        self.sched.evict(keys)
        for key in self.sched.to_evict:  # one process: the tensors go at once
            self.store.drop(key)
        self.sched.to_evict = []

    def lookup(self, rid, transfers) -> list[int]:
        self.claims.pop(rid, None)
        try:
            return self._lookup(rid, transfers)
        except Exception as e:  # never out of here: it would stop SGLang's scheduler
            logger.warning("recache item pool: lookup of %s failed: %s", rid, e)
            return []

    def _lookup(self, rid, transfers) -> list[int]:
        noted = self.noted.get(rid)
        if self.disabled or noted is None or not noted[1] or "segments" not in noted[1]:
            return []
        req, plan, hit = noted
        prompt = list(req.origin_input_ids)
        tail_end = hit + len(transfers[0].keys or []) * self.page
        cold = plan.get("cold") if self.cold.enabled else None
        try:
            end, run = self.sched.match(prompt, plan["segments"],
                                        set(map(str, cold)) if isinstance(cold, list) else (), hit)
        except (TypeError, ValueError, IndexError, KeyError) as e:  # malformed: claim nothing
            logger.warning("recache item pool: bad segments in %s: %s", rid, e)
            return []
        end = min(end, tail_end, len(prompt) - 1)
        # What the store must serve, read now: a claim SGLang cannot load aborts the request.
        fetched = self.cold.fetch(rid, [(p[0], p[4]) for p in run if is_cold(p)
                                        and max(p[1], hit) < min(p[1] + p[2], end)])
        parts, keys, from_store = [], [], 0
        for key, start, n, pos, *toks in run:
            lo, hi = max(start, hit), min(start + n, end)
            if lo >= hi:
                continue
            rows = fetched.get((key, toks[0])) if toks else None
            entry = Stacked(toks[0], rows) if rows is not None else \
                None if toks else self.store.get(key)
            if entry is None or (pos and self.rope is None):
                end = lo  # cut the run here: what follows is computed
                break
            parts.append((entry, lo - start, hi - lo, pos))
            keys.append(key)
            from_store += (hi - lo) if toks else 0
        if end <= hit or not parts:
            return []
        # Entries held: a later eviction cannot hurt.
        self.claims[rid] = (hit, end, parts, keys, from_store)
        return [(end - hit) // self.page]

    def load(self, rid, transfers) -> bool:
        claim = self.claims.pop(rid, None)
        slots = transfers[0].device_indices if transfers else None
        if claim is None or slots is None or len(slots) != claim[1] - claim[0]:
            return False  # SGLang frees the slots and computes the tokens
        hit, end, parts, keys, from_store = claim
        self.pending.append((slots.to(torch.long), parts))
        self.sched.touch(keys)
        self.loaded[rid] = self.loaded.get(rid, 0) + (end - hit)
        self.sched.stats["total_loaded_tokens"] += end - hit
        self.sched.stats["store_loaded_tokens"] += from_store
        return True

    def start_layer_wise_loading(self) -> int:
        if not self.pending:
            return -1
        pending, self.pending = self.pending, []
        counter = self.layer_done_counter
        idx = counter.update_producer()
        t0 = time.perf_counter()
        try:  # the step's requests in one gather: [tokens, layers, K/V, heads, dim]
            slots = torch.cat([s for s, _ in pending])
            parts = [p for _, ps in pending for p in ps]
            rows = item_codec.gather([(e.rows, off, n) for e, off, n, _ in parts])
            k = shifted(rows[:, :, 0], parts, self.rope).to(self.kv.dtype)
            v = rows[:, :, 1].to(self.kv.dtype)
            runs = slot_runs(slots)
            for layer in range(int(self.kv.layer_num)):
                write_rows(self.kv.k_buffer[layer], slots, runs, k[:, layer])
                write_rows(self.kv.v_buffer[layer], slots, runs, v[:, layer])
                counter.complete(idx, layer)
        except Exception as e:  # a bug: SGLang aborts the batch's loading requests (503)
            logger.error("recache item pool: load failed: %s", e)
            counter.fail(idx, e)
        self.sched.stats["total_load_s"] += time.perf_counter() - t0
        return idx

    def finish_layer_wise_loading(self, counter_index: int) -> bool:
        return self.layer_done_counter.finish(counter_index)

    def cancel_queued_load(self, rid) -> bool:
        return False  # loads are queued and written within one scheduling step

    # ---- offloads: acknowledged, never taken (fills come from the pool's own requests) ----

    def offload(self, transfers, session_id=None) -> bool:
        self.acks.append(True)
        return True

    def num_completed_offloads(self) -> int:
        return len(self.acks)

    def pop_completed_offload(self) -> bool:
        return self.acks.popleft() if self.acks else True

    def reset(self) -> None:
        """SGLang's ``/flush_cache``: the prefix cache goes, the pool stays (vLLM's reset
        without ``reset_external``); a plan with ``clear: true`` empties the pool."""
        self.claims.clear()
        self.pending.clear()
        self.acks.clear()
        self.layer_done_counter.reset()

    def close(self) -> None:
        self.cold.close()

    # ---- finished requests: fills and reports ----

    def on_release(self, req, tree_cache) -> None:
        rid = req.rid
        noted = self.noted.pop(rid, None)
        self.claims.pop(rid, None)
        self.cold.forget(rid)
        loaded = self.loaded.pop(rid, 0)
        plan = noted[1] if noted else plan_of(req)
        if not plan:
            return
        if "fill" in plan and req.finished() and getattr(req.kv, "holds_kv", False):
            self._fill(str(plan["fill"]), req, tree_cache)
        keys = [str(s[0]) for s in plan.get("segments", []) if isinstance(s, list) and s]
        if "fill" in plan:
            keys.append(str(plan["fill"]))
        self.cold.counts_into(self.sched.stats)
        report = self.sched.report(keys, loaded, bool(plan.get("list")))
        info = req.customized_info if isinstance(req.customized_info, dict) else {}
        info[PARAMS] = [report]
        req.customized_info = info

    def _fill(self, key: str, req, tree_cache) -> None:
        t0 = time.perf_counter()
        tokens = tuple(int(t) for t in req.origin_input_ids)
        n = len(tokens)
        if n == 0 or req.kv.kv_committed_len < n:
            return
        row = tree_cache.req_to_token_pool.req_to_token[req.kv.req_pool_idx, :n].long()
        rows = torch.stack([torch.stack((self.kv.k_buffer[layer][row], self.kv.v_buffer[layer][row]), 1)
                            for layer in range(int(self.kv.layer_num))], 1)
        try:
            kept = Stacked(tokens, item_codec.encode(rows, self.codec))
        except ValueError as err:  # a head size the codec cannot pack: said once
            logger.warning("recache item pool: %s; keeping the engine's rows", err)
            self.codec, kept = "bf16", Stacked(tokens, rows)
        self.store.put(key, kept)
        self.cold.put(key, tokens, rows)  # the engine's rows, before the codec
        self.sched.committed(key, tokens, kept.nbytes)
        for old in self.sched.to_evict:
            if old != key:
                self.store.drop(old)
        self.sched.to_evict = []
        self.sched.stats["total_fill_s"] += time.perf_counter() - t0


def _install() -> None:
    """Patches, once per process: ``match`` notes the request; ``on_release`` fills and
    reports; the streamer sends ``recache_pool`` once per request. Each checks ``_ACTIVE``
    and never lets an error of recache's out into SGLang."""
    if getattr(UnifiedCacheLinkerWrapper, "_recache_patched", False):
        return
    from sglang.srt.managers.scheduler_components.output_streamer import (
        SchedulerOutputStreamer,
    )
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    match, on_release = UnifiedCacheLinkerWrapper.match, UnifiedRadixCache.on_release
    request_level = SchedulerOutputStreamer.is_request_level_customized_info_key

    def match_noting(self, key, req, result):
        if _ACTIVE is not None and self.cache_linker is _ACTIVE:
            try:
                _ACTIVE.note(req, result.device_prefix_len)
            except Exception as e:
                logger.warning("recache item pool: note failed: %s", e)
        return match(self, key, req, result)

    def on_release_filling(self, req, *, checkpointed):
        if _ACTIVE is not None:
            try:
                _ACTIVE.on_release(req, self)
            except Exception as e:
                logger.warning("recache item pool: release of %s failed: %s", req.rid, e)
        return on_release(self, req, checkpointed=checkpointed)

    def is_request_level(self, key):
        return key == PARAMS or request_level(self, key)

    UnifiedCacheLinkerWrapper.match = match_noting
    UnifiedRadixCache.on_release = on_release_filling
    SchedulerOutputStreamer.is_request_level_customized_info_key = is_request_level
    UnifiedCacheLinkerWrapper._recache_patched = True
