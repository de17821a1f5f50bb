"""recache's item KV pool as a vLLM v1 KV connector (``KVConnectorBase_V1``, vLLM 0.32).

Load it with::

    --kv-transfer-config '{"kv_connector": "RecacheItemPoolConnector",
      "kv_connector_module_path": "recache_shim.item_pool", "kv_role": "kv_both",
      "kv_connector_extra_config": {"pool_bytes": 268435456}}'

(``device_tier_bytes`` in the same object: on a GPU engine, that much GPU memory also holds the
hottest entries, loaded in one launch for all layers: ``paged_kv.DeviceTier``. ``pool_codec``:
``bf16``, the default, ``int8`` or ``int4``, which keep about 2x and 3.6x the items in the same
bytes on the CPU path: ``item_codec``.)

Requests say what they want in ``kv_transfer_params`` (recache writes them):

- fill: ``{"recache_pool": {"fill": KEY, "evict": [KEY..]}}`` — the whole prompt is one item
  segment, computed alone from position 0; its K/V is captured under KEY.
- ranking: ``{"recache_pool": {"segments": [[KEY, start, len(, pos)], ..], "evict": [..],
  "cold": [KEY..]}}`` — the item segments of an item-as-prefix prompt, in prompt order from
  token 0; or of a user-as-prefix one, from the end of the user's profile (padded to whole
  blocks): claimed only when the engine's own prefix cache holds everything before them. ``pos`` (default 0, the shared start every entry was computed at) is the RoPE
  position the entry's first token takes: K is re-rotated by ``pos`` on load, so a pooled item
  can also sit after a user prefix. ``cold`` (optional): keys recache believes are in the
  store (``item_cold``); used only when this engine has a ``store`` config.
- list: ``{"recache_pool": {"list": true, "evict": [..]}}`` (recache sends prompt ``[0]``,
  ``max_tokens`` 1) — claims and stores nothing; its report carries ``list``: every committed
  entry as ``[KEY, first token id, tokens]`` (in least recently used order; fills not yet
  committed are not listed), after the request's own ``evict`` is applied.

Scheduler side (engine-core process; ``item_pool_sched``): the residency index (KEY ->
token ids, bytes), which is
authoritative: it answers ``get_num_new_matched_tokens`` with the leading run of segments that
are resident **with the same token ids** (labels included), so a stale or missing entry is
never claimed — those tokens are computed by the engine. With a store, a segment in ``cold``
not resident with these tokens continues the run as a cold part (with the prompt's token ids
for it, which the store's entry must have). recache's ``evict`` lists are applied on arrival;
if stores exceed ``pool_bytes`` the least recently used entries go (a safety net; recache's
own admission should keep it under). Every finished request gets back
``kv_transfer_params.recache_pool = {present: [KEY..], loaded_tokens (this request), entries,
bytes, total_loaded_tokens, stores, evictions, total_load_s, total_fill_s, store_*}`` (plus
``list`` for a list request). ``total_load_s`` / ``total_fill_s`` are the worker's cumulative
seconds since engine start spent writing pooled K/V into request slots (store fetches
included) and capturing + committing fills; they arrive with the worker metadata, so a report
includes them up to the previous engine step (the step a request finishes in is accounted
after vLLM asks for its report). The cold tier's counts (``item_cold_loads.cold_stats``; zero
without a store) come the same way, but ``store_loaded_tokens``: tokens claimed as cold parts;
``store_tokens_read`` (tokens the store's hits delivered) over ``total_store_fetch_s`` is the
store's fetch rate, which recache measures Alg. 1's ``B`` from.

Worker side (model process): the tensors (``item_pool_store``). Per step, in this order: loads
(``start_load_kv``), captures of finished fills (``save_kv_layer``, per layer), evictions and
commits (``wait_for_save``); commits, and the seconds spent loading and filling since the last
metadata (increments, summed by the scheduler), go back to the scheduler as worker metadata
(``PoolWorkerMeta``; across tensor-parallel workers a step's seconds are the slowest worker's,
since they work at the same time). Evictions decided by the scheduler reach the worker in a
later step than the last load that used them.

Cold tier (``item_cold``, ``item_cold_loads``; ``kv_connector_extra_config.store = {"master": "host:port",
"metadata": "http://host:port/metadata", "local": "127.0.0.1", "timeout_ms": 250,
"put_timeout_ms": 2000}``): a step's
cold parts are fetched in one call bounded by ``timeout_ms`` and written like pooled entries,
not kept (BAT §5.2); a committed fill is put to the store once, in the background. A part that
cannot be served (a miss, other tokens, a timeout, a local entry gone) is not written; its
blocks go to ``get_block_ids_with_load_errors`` and, with ``kv_load_failure_policy:
"recompute"``, vLLM recomputes from the first. CPU path only (the GPU path fails cold parts).

Position layout: a pooled segment's K was rotated at positions 0..len-1 (its own, shared start
position: BAT §4.2); with ``pos`` 0 it is written unchanged into the request's slots, so the
user and instruction tokens at their natural positions see every pooled item at the same
relative offsets, and pooled items do not attend to each other.

Two worker paths, chosen from the first layer's cache: vLLM's CPU attention (an ``isa``
layer; ISA-specific layout written through the engine's own op, ``item_pool_store``) and
vLLM 0.32's GPU layouts (``paged_kv``: FlashAttention / FlashInfer / any ``KVCacheLayout``
of the ``[blocks, heads, tokens, 2*D]`` view, loaded by recache's scatter kernel from pinned
host memory, one launch and event per layer so loads overlap the forward pass). If neither
fits (quantised caches, MLA, a failed probe) the connector says why once and claims nothing,
so vLLM computes everything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)
from vllm.logger import init_logger
from vllm.v1.metrics.cache_hit_source import CacheHitSource

from .item_cold_loads import (ColdLoads, add_cold_stats, blocks_of, is_cold, merge_counts,
                              served_name)
from . import item_codec
from .item_pool_sched import SchedulerState  # noqa: F401  (tests import it from here)
from .item_pool_store import Entry, PoolStore, SlotIO, split_kv
from .paged_kv import LayoutError, PagedBackend, RopeSpec, rope_shift

logger = init_logger(__name__)
PARAMS = "recache_pool"


def slots_of(block_ids: list[int], block_size: int, start: int, end: int) -> list[int]:
    return [block_ids[t // block_size] * block_size + t % block_size for t in range(start, end)]


@dataclass
class LoadOp:
    req_id: str
    parts: list[tuple]  # (key, first entry token to take, count, pos(, cold: segment tokens))
    slots: list[int]


@dataclass
class StoreOp:
    req_id: str
    key: str
    slots: list[int]
    tokens: tuple[int, ...] = ()  # the fill's token ids (the store's key and check)


@dataclass
class PoolMeta(KVConnectorMetadata):
    loads: list[LoadOp] = field(default_factory=list)
    stores: list[StoreOp] = field(default_factory=list)
    evict: list[str] = field(default_factory=list)
    clear: bool = False  # drop every entry (vLLM's /reset_prefix_cache?reset_external=true)


@dataclass
class PoolWorkerMeta(KVConnectorWorkerMetadata):
    stored: list[tuple[str, str, int]] = field(default_factory=list)  # (req_id, key, bytes)
    load_s: float = 0.0  # seconds loading since the worker's previous metadata
    fill_s: float = 0.0  # seconds capturing and committing fills, likewise
    cold: dict = field(default_factory=dict)  # cold tier increments (ColdLoads.take_counts)

    def aggregate(self, other: "PoolWorkerMeta") -> "PoolWorkerMeta":
        # vLLM aggregates one step's metadata across workers (one worker: never called).
        # Workers run concurrently, so the step took the slowest one's time, not the sum.
        return PoolWorkerMeta(self.stored + other.stored, max(self.load_s, other.load_s),
                              max(self.fill_s, other.fill_s), merge_counts(self.cold, other.cold))


def _model_rope(vllm_config) -> RopeSpec | None:
    """The served model's RoPE (re-rotation of pooled K), or None when it cannot be read."""
    try:
        mc = vllm_config.model_config
        return RopeSpec.from_hf(mc.hf_config, int(mc.get_head_size()))
    except Exception:  # no model config (tests) or an unusual one: no re-rotation
        return None


def pool_params(request) -> dict | None:
    p = getattr(request, "kv_transfer_params", None)
    return p.get(PARAMS) if isinstance(p, dict) else None


class RecacheItemPoolConnector(KVConnectorBase_V1):
    _cache_hit_source = CacheHitSource.HOST

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self.block_size = vllm_config.cache_config.block_size
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        self.sched = SchedulerState(int(extra.get("pool_bytes", 256 << 20)))
        self.matched: dict[str, tuple[int, list]] = {}
        self.plans: dict[str, list] = {}  # req_id -> [load parts, load range] or store key
        self.blocks: dict[str, list[int]] = {}
        self.fills: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.loaded: dict[str, int] = {}
        # worker side
        self.pool_bytes = int(extra.get("pool_bytes", 256 << 20))
        # GPU engines: bytes of GPU memory for the hottest entries (paged_kv.DeviceTier); size
        # the engine's KV cache that much smaller (--kv-cache-memory) to keep memory equal.
        self.tier_bytes = int(extra.get("device_tier_bytes", 0))
        self.rope = _model_rope(vllm_config)
        self.codec = str(extra.get("pool_codec", "bf16"))
        if self.codec not in item_codec.CODECS:
            raise ValueError(f"recache item pool: unknown pool_codec {self.codec!r} "
                             f"(one of {', '.join(item_codec.CODECS)})")
        self.cold = ColdLoads(extra.get("store"), served_name(vllm_config))
        if role == KVConnectorRole.WORKER:
            self.cold.start()  # the client's set-up, in the background
        self.load_errors: set[int] = set()  # blocks not loaded this step (vLLM recomputes)
        self.store = PoolStore()
        self.io: SlotIO | None = None
        self.paged: PagedBackend | None = None
        self.cpu_attn = False
        self.disabled: str | None = None
        self.captured: dict[str, Entry] = {}
        self.stored_out: list[tuple[str, str, int]] = []
        self.load_s = 0.0  # seconds not yet shipped in worker metadata
        self.fill_s = 0.0

    # ---------------- scheduler side ----------------

    def on_new_request(self, request) -> None:
        p = pool_params(request)
        if p and p.get("evict"):
            self.sched.evict(str(k) for k in p["evict"])

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        p = pool_params(request)
        if not p or "segments" not in p:
            return 0, False
        prompt = list(request.prompt_token_ids or [])
        cold = p.get("cold") if self.cold.enabled else None
        try:
            end, run = self.sched.match(prompt, p["segments"],
                                        set(map(str, cold)) if isinstance(cold, list) else (),
                                        num_computed_tokens)
        except (TypeError, ValueError, IndexError, KeyError) as e:  # malformed: claim nothing
            logger.warning("recache item pool: bad segments in %s: %s", request.request_id, e)
            return 0, False
        end = min(end, len(prompt) - 1)  # the engine must compute at least one token
        self.matched[request.request_id] = (end, run)
        return max(0, end - num_computed_tokens), False

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        rid = request.request_id
        p = pool_params(request)
        if p and "fill" in p and rid not in self.fills:
            self.fills[rid] = (str(p["fill"]), tuple(request.prompt_token_ids or []))
        if num_external_tokens <= 0:
            return
        end, run = self.matched.get(rid, (0, []))
        first = end - num_external_tokens
        parts = []
        for key, start, n, pos, *toks in run:
            lo, hi = max(start, first), min(start + n, end)
            if lo < hi:
                parts.append((key, lo - start, hi - lo, pos, *toks))
                self.sched.stats["store_loaded_tokens"] += (hi - lo) if toks else 0
        self.plans[rid] = [parts, first, end]
        self.sched.touch(p[0] for p in run if not is_cold(p))
        self.loaded[rid] = num_external_tokens
        self.sched.stats["total_loaded_tokens"] += num_external_tokens

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        meta = PoolMeta(evict=self.sched.to_evict, clear=self.sched.clear)
        self.sched.to_evict, self.sched.clear = [], False
        done: dict[str, int] = {}
        for req in scheduler_output.scheduled_new_reqs:
            self.blocks[req.req_id] = list(req.block_ids[0])
            done[req.req_id] = req.num_computed_tokens
        cached = scheduler_output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            new = cached.new_block_ids[i]
            if rid in cached.resumed_req_ids and new is not None:
                self.blocks[rid] = list(new[0])
            elif new is not None:
                self.blocks.setdefault(rid, []).extend(new[0])
            done[rid] = cached.num_computed_tokens[i]
        for rid, computed in done.items():
            blocks = self.blocks.get(rid, [])
            plan = self.plans.pop(rid, None)
            if plan is not None:
                parts, first, end = plan
                meta.loads.append(LoadOp(rid, parts, slots_of(blocks, self.block_size, first, end)))
            fill = self.fills.get(rid)
            n = computed + scheduler_output.num_scheduled_tokens.get(rid, 0)
            if fill is not None and n >= len(fill[1]):
                meta.stores.append(StoreOp(rid, fill[0], slots_of(blocks, self.block_size, 0,
                                                                  len(fill[1])), fill[1]))
        return meta

    def update_connector_output(self, connector_output) -> None:
        wm = connector_output.kv_connector_worker_meta
        if wm is None:
            return
        self.sched.worker_times(getattr(wm, "load_s", 0.0), getattr(wm, "fill_s", 0.0))
        add_cold_stats(self.sched.stats, getattr(wm, "cold", None) or {})
        for rid, key, nbytes in getattr(wm, "stored", []) or []:
            fill = self.fills.pop(rid, None)
            if fill is not None and fill[0] == key:
                self.sched.committed(key, fill[1], nbytes)

    def request_finished(self, request, block_ids):
        rid = request.request_id
        self.blocks.pop(rid, None)
        self.plans.pop(rid, None)
        self.matched.pop(rid, None)
        p = pool_params(request)
        if not p:
            return False, None
        keys = [str(s[0]) for s in p.get("segments", [])]
        if "fill" in p:
            keys.append(str(p["fill"]))
        out = self.sched.report(keys, self.loaded.pop(rid, 0), bool(p.get("list")))
        return False, {PARAMS: out}

    def reset_cache(self) -> bool:
        # Fills still in flight are forgotten too: their commits no longer match a fill.
        self.sched.reset()
        self.fills.clear()
        return True

    # ---------------- worker side ----------------

    def _paged(self, forward_context) -> PagedBackend | None:
        """The GPU-layout path, built once from every layer's cache (None: CPU attention)."""
        if self.paged is not None or self.cpu_attn or self.disabled is not None:
            return self.paged
        layers = list(self._layers(forward_context))
        if not layers:
            return None
        if getattr(layers[0][1], "isa", None) is not None:
            self.cpu_attn = True  # vLLM's CPU attention: item_pool_store's slot I/O
            return None
        if self.codec != "bf16":  # the arena's rows are the kernel's: no codec there yet
            logger.warning("recache item pool: pool_codec %s is CPU-path only; this engine's "
                           "arena keeps %s rows", self.codec, layers[0][2].dtype)
        try:
            kv0 = layers[0][2]
            self.paged = PagedBackend({n: kv for n, _, kv in layers}, kv0.shape[3] // 2,
                                      self.rope, self.pool_bytes, self.tier_bytes)
            logger.info("recache item pool: paged %s cache, %d layers, arena %d rows, device "
                        "tier %d rows", kv0.device, len(layers), self.paged.arena.capacity,
                        self.paged.tier.arena.capacity if self.paged.tier else 0)
        except (LayoutError, RuntimeError, ValueError) as e:
            self.disabled = str(e)
            logger.warning("recache item pool disabled: %s", e)
        return self.paged

    def _slot_io(self, layer, kv_layer: torch.Tensor) -> SlotIO | None:
        if self.io is not None or self.disabled is not None:
            return self.io
        try:
            isa = getattr(layer, "isa", None)
            if isa is None or kv_layer.dim() != 4:
                raise RuntimeError("not vLLM's CPU attention backend")
            from vllm import _custom_ops as ops

            _, heads, bs, two_d = kv_layer.shape
            io = SlotIO(ops.cpu_attn_reshape_and_cache, isa, heads, bs, two_d // 2, kv_layer.dtype)
            io.verify()
            self.io = io
            self.cold.configure(heads, two_d // 2, kv_layer.dtype)
            logger.info("recache item pool: CPU attention, isa %s, layout probe verified", isa)
        except Exception as e:  # any failure means: never load, let vLLM compute
            self.disabled = str(e)
            logger.warning("recache item pool disabled: %s", e)
        return self.io

    def _layers(self, forward_context):
        for name, layer in forward_context.no_compile_layers.items():
            kv = getattr(layer, "kv_cache", None)
            if isinstance(kv, torch.Tensor) and kv.dim() == 4:
                yield name, layer, kv

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, PoolMeta):
            return
        paged = self._paged(forward_context)
        if paged is not None:
            t0 = time.perf_counter()
            loads, failed = self.cold.local_only(meta.loads, paged.arena.entries.__contains__)
            self._failed(failed)
            paged.load(loads)  # enqueued; wait_for_layer_load waits per layer
            self.load_s += time.perf_counter() - t0
            return
        if not meta.loads:
            return
        layers = list(self._layers(forward_context))
        io = self._slot_io(layers[0][1], layers[0][2]) if layers else None
        if io is None:  # the scheduler claimed what this worker cannot load: vLLM recomputes
            self._failed(s for op in meta.loads for s in op.slots)
            return
        t0 = time.perf_counter()  # after the one-time layout probe
        writes, failed = self.cold.resolve(meta.loads, [n for n, _, _ in layers],
                                           self.store.get, self.rope is not None)
        self._failed(failed)
        for name, _, kv in layers:
            kc, vc = split_kv(kv)
            for slots, parts in writes:
                k = item_codec.gather([(e.k[name], off, n) for e, off, n, _ in parts])
                v = item_codec.gather([(e.v[name], off, n) for e, off, n, _ in parts])
                io.write(kc, vc, slots, self._shifted(k, parts), v)
        self.load_s += time.perf_counter() - t0

    def _shifted(self, k: torch.Tensor, parts) -> torch.Tensor:
        """``k`` (the parts' rows in order) with each part re-rotated by its ``pos``: once for
        all where they share it (a user-first prompt's pooled run)."""
        pos = {p for *_, p in parts}
        if pos == {0}:
            return k
        if len(pos) == 1:
            return rope_shift(k, pos.pop(), self.rope)
        rows = k.split([n for _, _, n, _ in parts])
        return torch.cat([rope_shift(r, p, self.rope) if p else r
                          for r, (*_, p) in zip(rows, parts)])

    def _failed(self, slots) -> None:
        self.load_errors |= blocks_of(slots, self.block_size)

    def get_block_ids_with_load_errors(self) -> set[int]:
        out, self.load_errors = self.load_errors, set()
        return out

    def wait_for_layer_load(self, layer_name: str) -> None:
        if self.paged is not None:
            self.paged.wait_layer(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata, **kwargs) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, PoolMeta) or not meta.stores:
            return
        from vllm.forward_context import get_forward_context

        if self.paged is not None:
            t0 = time.perf_counter()
            self.paged.capture(layer_name, meta.stores)
            self.fill_s += time.perf_counter() - t0
            return
        layer = get_forward_context().no_compile_layers.get(layer_name)
        io = self._slot_io(layer, kv_layer)
        if io is None:
            return
        t0 = time.perf_counter()
        kc, vc = split_kv(kv_layer)
        for op in meta.stores:
            k, v = io.read(kc, vc, torch.tensor(op.slots, dtype=torch.long))
            e = self.captured.setdefault(op.req_id, Entry(tokens=()))
            e.k[layer_name] = k
            e.v[layer_name] = v
        self.fill_s += time.perf_counter() - t0

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if not isinstance(meta, PoolMeta):
            return
        if self.paged is not None:
            t0 = time.perf_counter()
            self.stored_out.extend(self.paged.commit(meta.stores, meta.evict, meta.clear))
            if meta.stores:
                self.fill_s += time.perf_counter() - t0
            return
        if meta.clear:
            self.store.entries.clear()
        for key in meta.evict:
            self.store.drop(key)
        t0 = time.perf_counter()
        for op in meta.stores:
            e = self.captured.pop(op.req_id, None)
            if e is not None and e.k:
                e.tokens = tuple(op.tokens)
                try:
                    kept = e.encoded(self.codec)
                except ValueError as err:  # a head size the codec cannot pack: said once
                    logger.warning("recache item pool: %s; keeping the engine's rows", err)
                    self.codec, kept = "bf16", e
                self.store.put(op.key, kept)
                self.stored_out.append((op.req_id, op.key, kept.nbytes))
                self.cold.write_through(op.key, e)  # the store keeps the engine's rows
        if meta.stores:
            self.fill_s += time.perf_counter() - t0
        self.captured.clear()

    def shutdown(self):
        self.cold.close()

    def build_connector_worker_meta(self):
        cold = self.cold.take_counts()
        if not (self.stored_out or self.load_s or self.fill_s or cold):
            return None
        out = PoolWorkerMeta(self.stored_out, self.load_s, self.fill_s, cold)
        self.stored_out, self.load_s, self.fill_s = [], 0.0, 0.0
        return out
