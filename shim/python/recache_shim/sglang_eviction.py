"""Steer SGLang's radix-cache eviction by the order recache publishes.

SGLang evicts whole radix-tree leaves, picked from a heap keyed by its eviction
strategy's ``get_priority(node)`` (LRU: last access time). recache runs the active eviction
policy over the same request stream and publishes, in the file named by
``RECACHE_SHIM_ORDER`` (the vLLM shim's file format and reader, ``recache_order_*`` in
``librecache_shim.so``, read through :mod:`recache_shim.order_reader` like the vLLM plugin),
the block hashes the policy would have evicted already, then (LRU, LFU) the tips of what it
keeps in its eviction order. This module wraps the strategy so a
leaf holding a listed page sorts before every unlisted leaf (listed leaves by their
earliest-listed page); unlisted leaves keep SGLang's own order. The number of tokens SGLang
evicts is unchanged; which leaves go is the policy's choice.

What the SGLang order carries: the ``block_hashes`` of SGLang's ``BlockStored`` KV events
(signed int64 there; the order file holds the same 64 bits as u64), one per page (one per
token at SGLang's default page size 1). SGLang computes them into ``node.hash_value`` only
when KV events are on (``--kv-events-config``), which recache's mirror needs anyway; a leaf
without hashes, or in a LoRA / cache-salt namespace (whose event hashes are re-hashed), is
unlisted and follows SGLang's order.

Where it applies: the Python tree cores (``RadixCache`` and the unified cache's
``UnifiedTreeCore``). SGLang 0.5.23 defaults to a Rust tree core whose eviction strategy is
native code, so with steering configured :func:`install` selects the Python core
(``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python``) unless the user chose one.

Fallback is the default: no ``RECACHE_SHIM_ORDER``, an SGLang other than 0.5.23, no library,
a missing/torn order or one older than ``RECACHE_SHIM_ORDER_MAX_AGE_MS`` (default 2000), or
any exception while ranking leave SGLang's native order. Nothing waits on recache: a ``stat``
at most every 5 ms, one file read when it changed, both in the Rust reader.
"""

import ctypes
import logging
import os
import shutil
import sys

from . import order_reader
from .order_reader import MAX_AGE_ENV, ORDER_ENV  # noqa: F401 (re-exported)

# Under "sglang." so SGLang's log configuration shows these lines in the server log.
logger = logging.getLogger("sglang.recache_shim")
#: The SGLang version whose radix caches this patch was read against and tested with.
TESTED_SGLANG = "0.5.23"
TREE_CORE_ENV = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"
#: Re-check the file at most this often (seconds); the eviction heap calls us per leaf.
REFRESH_S = 0.005
#: Log the counters every this many steered leaves (evidence in the server log).
LOG_EVERY = 500

_order = order_reader.OrderReader(logger, ("steered", "unlisted", "unhashed", "errors"),
                                   engine="sglang")


def stats() -> dict:
    """Counters for tests and debugging (this process only)."""
    return {"fresh": _order.fresh, **_order.counts}


def _page_hashes(node):
    """The node's event hashes as a ctypes u64 array, cached on the node (None: unknown)."""
    hv = node.hash_value
    key = node.key
    if not hv or key is None or key.extra_key is not None or key.cache_salt is not None:
        return None
    cached = getattr(node, "_recache_pages", None)
    # A split replaces hash_value with a new list, so identity tells whether the cache holds.
    if cached is not None and cached[0] is hv:
        return cached[1]
    # hash_str_to_int64: the first 16 hex digits, as SGLang's events publish them.
    arr = (ctypes.c_uint64 * len(hv))(*(int(h[:16], 16) & order_reader.MASK for h in hv))
    node._recache_pages = (hv, arr)
    return arr


def rank(node):
    """The node's place in recache's order (earliest listed page), or None if unlisted."""
    pages = _page_hashes(node)
    if pages is None:
        _order.counts["unhashed"] += 1
        return None
    out = _order.ranks(pages)
    if out is None:
        return None
    best = min(out)
    if best == order_reader.UNRANKED:
        _order.counts["unlisted"] += 1
        return None
    return best


class SteeredStrategy:
    """SGLang eviction strategy: recache's victims first, then the native strategy's order.

    Keys are ``(0, rank)`` for listed leaves and ``(1, native key)`` for the rest, so the two
    kinds never compare their second elements with each other.
    """

    def __init__(self, native):
        self.native = native

    def __getattr__(self, name):
        # Parameters SGLang reads off its strategy (T-LRU threshold, SLRU threshold, ...).
        return getattr(self.native, name)

    def get_priority(self, node):
        native = self.native.get_priority(node)
        try:
            if _order.is_fresh(REFRESH_S):
                r = rank(node)
                if r is not None:
                    if _order.add_steered(1, LOG_EVERY):
                        logger.info("recache eviction steering: %s", stats())
                    return (0, r)
        except Exception as e:  # never break eviction: native order for this leaf
            _order.error(e)
        return (1, native)


def _wrap_init(cls) -> None:
    if getattr(cls, "_recache_steered", False):
        return
    native_init = cls.__init__

    def __init__(self, *args, **kwargs):
        native_init(self, *args, **kwargs)
        strategy = getattr(self, "eviction_strategy", None)
        if strategy is not None and not isinstance(strategy, SteeredStrategy):
            self.eviction_strategy = SteeredStrategy(strategy)

    cls.__init__ = __init__
    cls._recache_steered = True


def _find_ninja() -> None:
    """The Python tree core hashes pages with a C++ extension torch builds on first use, and
    torch looks for ``ninja`` on PATH; SGLang depends on the ``ninja`` wheel, whose binary sits
    next to the engine's Python, which an unactivated venv does not have on PATH."""
    bindir = os.path.dirname(sys.executable)
    if shutil.which("ninja") is None and os.path.exists(os.path.join(bindir, "ninja")):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
        logger.info("recache eviction steering: %s put on PATH for SGLang's ninja", bindir)


def install() -> bool:
    """Wraps the Python radix caches' eviction strategy if configured; True when on."""
    path = order_reader.order_path()
    if not path:
        logger.info("recache eviction steering off (%s not set); SGLang evicts natively",
                    ORDER_ENV)
        return False
    try:
        import sglang
        from sglang.srt.mem_cache import radix_cache
        from sglang.srt.mem_cache.unified_cache import unified_tree_core
    except Exception as e:  # not inside SGLang
        logger.info("recache eviction steering off: SGLang not importable (%s)", e)
        return False
    version = getattr(sglang, "__version__", "?")
    if version.split("+")[0] != TESTED_SGLANG:
        logger.error("recache eviction steering DISABLED: SGLang %s is not the tested %s; "
                     "its radix cache may differ, so SGLang keeps its native eviction",
                     version, TESTED_SGLANG)
        return False
    if not _order.open(path):
        return False
    core = os.environ.setdefault(TREE_CORE_ENV, "python")
    if core != "python":
        logger.error("recache eviction steering needs SGLang's Python tree core, but %s=%s; "
                     "that tree core evicts natively", TREE_CORE_ENV, core)
    _find_ninja()
    _wrap_init(radix_cache.RadixCache)
    _wrap_init(unified_tree_core.UnifiedTreeCore)
    logger.info("recache eviction steering on: SGLang %s follows %s (stale after %d ms)",
                version, path, order_reader.max_age_ms())
    return True


def register() -> None:
    """``sglang.srt.plugins`` entry point: SGLang calls it early in every process."""
    try:
        install()
    except Exception as e:  # never break engine start-up
        logger.warning("recache eviction steering not installed, SGLang evicts natively: %s", e)
