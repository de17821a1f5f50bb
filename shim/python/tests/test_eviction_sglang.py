"""Eviction steering against SGLang 0.5.23's real radix caches (no server, no GPU): the unified
cache with the Python tree core (what a server with the plugin runs) and the legacy
RadixCache. With a fresh order the leaf holding a listed page is evicted instead of SGLang's
LRU leaf; with a stale or missing order SGLang's own choice stands. The listed ids are taken
from the caches' own BlockStored KV events, the ids recache's mirror sees. Run with the
SGLang venv's Python and RECACHE_SHIM_LIB pointing at librecache_shim.so (the plugin finds
the venv's `ninja`, which SGLang's page-hash extension is built with on first use):

    RECACHE_SHIM_LIB=target/release/librecache_shim.so \
      ~/.cache/recache-testbed/venv-sglang/bin/python shim/python/tests/test_eviction_sglang.py
"""

import json
import os
import sys
import tempfile
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from test_eviction_vllm import write_order  # noqa: E402 (same file format)

PROMPTS = {"a": [1, 2, 3, 4], "b": [5, 6, 7], "c": [8, 9, 10, 11, 12]}  # inserted a, b, c


class Allocator:
    """Stands in for SGLang's KV allocator: the caches only hand freed slots back to it."""

    def __init__(self):
        import torch
        self.device = torch.device("cpu")

    def free(self, _indices):
        pass

    def free_segment(self, _indices, start_pos=0):
        pass


def build(kind):
    """A cache of `kind` ("unified" or "legacy") holding a, b, c (a least recent)."""
    import torch
    from sglang.srt.mem_cache.base_prefix_cache import InsertParams
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    params = dict(disable=False, req_to_token_pool=None, token_to_kv_pool_allocator=Allocator(),
                  page_size=1, eviction_policy="lru", enable_kv_cache_events=True)
    if kind == "unified":
        cache = UnifiedRadixCache(CacheInitParams(
            **params, tree_components=(ComponentType.FULL,),
            tree_core_backend=os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"]))
        events = cache.tree_core.kv_events
    else:
        cache = RadixCache(CacheInitParams(**params))
        events = cache.kv_events
    events.take()
    hashes = {}
    for name, toks in PROMPTS.items():
        cache.insert(InsertParams(key=RadixKey(array("q", toks)),
                                  value=torch.arange(len(toks), dtype=torch.int64)))
        (stored,) = events.take()
        hashes[name] = [h & ((1 << 64) - 1) for h in stored.block_hashes]
    return cache, hashes


def cached(cache):
    from sglang.srt.mem_cache.base_prefix_cache import MatchPrefixParams
    from sglang.srt.mem_cache.radix_cache import RadixKey
    return sorted(n for n, toks in PROMPTS.items()
                  if cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", toks))))
                  .device_prefix_len == len(toks))


def evict(cache, tokens):
    from sglang.srt.mem_cache.base_prefix_cache import EvictParams
    return cache.evict(EvictParams(num_tokens=tokens)).num_tokens_evicted


def check(kind, order):
    from recache_shim import sglang_eviction as steer

    cache, _ = build(kind)  # no order file yet: native LRU evicts a
    assert evict(cache, 1) == 4 and cached(cache) == ["b", "c"], (kind, cached(cache))

    cache, h = build(kind)
    write_order(order, [h["c"][2], h["b"][0]])  # c first (a middle page of it), then b
    assert steer.SteeredStrategy is type(
        cache.tree_core.eviction_strategy if kind == "unified" else cache.eviction_strategy)
    assert evict(cache, 1) == 5 and cached(cache) == ["a", "b"], (kind, cached(cache))
    assert evict(cache, 1) == 3 and cached(cache) == ["a"], (kind, cached(cache))

    cache, h = build(kind)  # b listed, then more than b needed: a (SGLang's LRU) next
    write_order(order, [h["b"][1]])
    assert evict(cache, 4) == 7 and cached(cache) == ["c"], (kind, cached(cache))

    cache, h = build(kind)
    write_order(order, [h["c"][0]], age_ms=60_000)  # stale: native again
    assert evict(cache, 1) == 4 and cached(cache) == ["b", "c"], (kind, cached(cache))


def main():
    order = os.path.join(tempfile.mkdtemp(), "order.bin")
    os.environ["RECACHE_SHIM_ORDER"] = order
    os.environ.pop("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", None)
    from recache_shim import sglang_eviction as steer
    steer.REFRESH_S = 0.0
    assert steer.install(), "steering did not install (SGLang version? RECACHE_SHIM_LIB?)"
    assert os.environ["SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"] == "python"
    for kind in ("unified", "legacy"):
        check(kind, order)
    assert steer.stats()["steered"] > 0 and steer.stats()["errors"] == 0, steer.stats()
    # Each kind's last step let a fresh order go stale: counted (and logged) each time.
    assert steer.stats()["went_stale"] == 2, steer.stats()
    # The status beside the order says so, for recache's metrics.
    with open(order + ".status") as f:
        status = json.load(f)
    assert status["engine"] == "sglang" and status["fresh"] is False, status
    assert status["went_stale"] == 2, status
    print("eviction steering against SGLang radix caches: ok", steer.stats())


if __name__ == "__main__":
    main()
