"""Eviction steering against vLLM's real BlockPool (no engine, no GPU): with a fresh order
the listed free block is evicted instead of vLLM's LRU head; with a stale or missing order,
vLLM's own choice stands. Run with the testbed venv's Python (vLLM 0.32.0 installed) and
RECACHE_SHIM_LIB pointing at librecache_shim.so:

    RECACHE_SHIM_LIB=target/release/librecache_shim.so \
      ~/.cache/recache-testbed/venv-vllm/bin/python shim/python/tests/test_eviction_vllm.py
"""

import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_order(path, victims, age_ms=0):
    body = b"RCORDER1" + struct.pack("<4Q", int(time.time() * 1000) - age_ms, 1, 1, len(victims))
    body += b"".join(struct.pack("<Q", v) for v in victims)
    h = 0xCBF29CE484222325
    for b in body:
        h = ((h ^ b) * 0x100000001B3) & ((1 << 64) - 1)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(body + struct.pack("<Q", h))
    os.replace(tmp, path)


def key(i):
    return (1000 + i).to_bytes(32, "big") + (0).to_bytes(4, "big")


def pool_with_five_cached(shift=0):
    """Blocks 1..5 hold key(0..4) (block ids rotated by ``shift``), freed in key order."""
    from vllm.v1.core.block_pool import BlockPool
    pool = BlockPool(num_gpu_blocks=6, enable_caching=True, hash_block_size=32)
    blocks = pool.get_new_blocks(5)
    blocks = blocks[shift:] + blocks[:shift]
    for i, b in enumerate(blocks):
        pool._insert_block_hash(key(i), b, None)
    pool.free_blocks(blocks)  # LRU order: 1000 first
    return pool


def evicted(pool):
    return [i for i in range(5) if pool.cached_block_hash_to_block.get_one_block(key(i)) is None]


def main():
    order = os.path.join(tempfile.mkdtemp(), "order.bin")
    os.environ["RECACHE_SHIM_ORDER"] = order
    from recache_shim import eviction
    eviction.REFRESH_S = 0.0
    assert eviction.install(), "steering did not install (vLLM version? RECACHE_SHIM_LIB?)"

    pool = pool_with_five_cached()  # no order file yet: native
    pool.get_new_blocks(1)
    assert evicted(pool) == [0], evicted(pool)

    write_order(order, [1003, 1001])
    pool = pool_with_five_cached()
    pool.get_new_blocks(1)
    assert evicted(pool) == [3], evicted(pool)
    pool.get_new_blocks(2)  # 1001 (listed), then vLLM's LRU head 1000
    assert evicted(pool) == [0, 1, 3], evicted(pool)
    # The same block ids holding other hashes: the shim's per-block hash cache must not
    # steer by what a block held before.
    pool = pool_with_five_cached(shift=2)
    pool.get_new_blocks(1)
    assert evicted(pool) == [3], evicted(pool)

    # Uncached free blocks at the head: vLLM would evict only the cached one among the three
    # blocks it takes (1000); steered, that one eviction is the order's victim (1003) and the
    # uncached blocks are still used.
    from vllm.v1.core.block_pool import BlockPool
    pool = BlockPool(num_gpu_blocks=8, enable_caching=True, hash_block_size=32)
    blocks = pool.get_new_blocks(5)  # two uncached blocks stay at the head of the queue
    for i, b in enumerate(blocks):
        pool._insert_block_hash(key(i), b, None)
    pool.free_blocks(blocks)
    write_order(order, [1003, 1001])
    pool.get_new_blocks(3)
    assert evicted(pool) == [3], evicted(pool)

    # An empty order from a live recache (LARU ranks no kept blocks once the engine holds
    # what it keeps): fresh, nothing to steer, so vLLM's choice stands and nothing went stale.
    write_order(order, [])
    pool = pool_with_five_cached()
    pool.get_new_blocks(1)
    assert evicted(pool) == [0], evicted(pool)
    assert eviction.stats()["fresh"] is True, eviction.stats()

    assert eviction.stats()["went_stale"] == 0, eviction.stats()
    write_order(order, [1004], age_ms=60_000)  # stale: native again, counted (and logged) once
    pool = pool_with_five_cached()
    pool.get_new_blocks(1)
    assert evicted(pool) == [0], evicted(pool)
    pool.get_new_blocks(1)
    assert eviction.stats()["went_stale"] == 1, eviction.stats()
    # The status beside the order says so, for recache's metrics.
    with open(order + ".status") as f:
        status = json.load(f)
    assert status["engine"] == "vllm" and status["fresh"] is False, status
    assert status["went_stale"] == 1 and status["checked"] is True, status
    print("eviction steering against vLLM BlockPool: ok", eviction.stats())


if __name__ == "__main__":
    main()
