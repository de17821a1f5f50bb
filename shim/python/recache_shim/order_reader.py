"""Read the eviction order recache publishes; shared by the engine steering plugins.

Owns everything the vLLM plugin (:mod:`recache_shim.eviction`) and the SGLang plugin
(:mod:`recache_shim.sglang_eviction`) do alike around recache's order file: its env
(``RECACHE_SHIM_ORDER``, ``RECACHE_SHIM_ORDER_MAX_AGE_MS``), opening a reader on it through
``librecache_shim.so`` (``recache_order_open/refresh/ranks/hashes``, declared in :mod:`._lib`), the
throttled freshness check (a missing, torn or stale order is not fresh; an empty one from a live
recache is: it has nothing to steer, so the engine's own choice stands), ranking
64-bit block hashes against the order or copying its listed hashes, and the steering counters with their periodic log and
first-errors warning. How an engine's blocks map to those hashes and where the engine is
patched stay in each plugin.

Nothing here waits on recache: a fresh check is a ``stat`` at most every ``refresh_s``, and
one file read when the file changed, both in the Rust reader.

So that recache can say in its metrics what the engine does with its order, the reader writes
a small status file beside the order (``ORDER.status``, JSON: engine, pid, whether the last
check found the order fresh, the counters, the wall time of that check): when it opens the
order, whenever freshness changes, and at most every :data:`STATUS_EVERY_S` otherwise. It is
written to a temporary name and renamed, and a failure to write it is counted, never raised.
"""

import array
import ctypes
import json
import logging
import os
import time
from typing import Optional, Sequence

ORDER_ENV = "RECACHE_SHIM_ORDER"
MAX_AGE_ENV = "RECACHE_SHIM_ORDER_MAX_AGE_MS"
#: Orders older than this (ms) are stale unless ``RECACHE_SHIM_ORDER_MAX_AGE_MS`` says
#: otherwise; recache re-publishes every 250 ms while alive.
DEFAULT_MAX_AGE_MS = 2000
#: The rank ``recache_order_ranks`` gives a hash the order does not list.
UNRANKED = (1 << 64) - 1
#: The order holds hashes as u64: engine hashes are masked to their low 64 bits.
MASK = UNRANKED
#: Warn about the first this many steering errors; later ones are only counted.
WARN_ERRORS = 3
#: The status file beside the order: ``ORDER`` + this suffix.
STATUS_SUFFIX = ".status"
#: Seconds between status writes while freshness does not change.
STATUS_EVERY_S = 1.0


def order_path() -> Optional[str]:
    """The order file ``RECACHE_SHIM_ORDER`` names; None (or empty) means steering off."""
    return os.environ.get(ORDER_ENV)


def max_age_ms() -> int:
    try:
        return int(os.environ.get(MAX_AGE_ENV, str(DEFAULT_MAX_AGE_MS)))
    except ValueError:
        return DEFAULT_MAX_AGE_MS


class OrderReader:
    """One plugin's reader handle on the order file, its freshness cache and its counters.

    ``counters`` names the plugin's counters in the order its stats list them (``errors``
    among them); the plugin's ``stats()`` reads :attr:`counts`, :attr:`fresh` and
    :attr:`checked`. Log lines go to the plugin's ``logger`` (under the engine's namespace).
    """

    def __init__(self, logger: logging.Logger, counters: Sequence[str], engine: str = ""):
        self.logger = logger
        self.engine = engine
        #: ``ORDER.status`` once opened; when it was last written (monotonic); failed writes.
        self.status_path: Optional[str] = None
        self.status_written = 0.0
        self.status_errors = 0
        self.lib = None
        self.handle = None
        #: ``time.monotonic()`` of the last refresh; 0.0 before the first.
        self.checked = 0.0
        #: Whether the last refresh found a fresh order (recache alive), empty or not.
        self.fresh = False
        self.counts = {name: 0 for name in counters}
        #: The listed hashes of the order last copied (``listed``) and that order's version.
        self._listed = array.array("Q")
        self._listed_version: Optional[int] = None
        #: Times a fresh order went stale (recache stopped publishing, or its file went bad):
        #: from then on the engine's own eviction order decides, which the log says once.
        self.counts["went_stale"] = 0
        #: Seconds spent steering the engine (the plugin adds them): recache's cost inside
        #: the engine, which its benchmarks report beside the loop's own.
        self.counts["steer_s"] = 0.0
        self.was_fresh = False

    def open(self, path: str) -> bool:
        """Load the library and open a reader on ``path`` (once); False, logged, if either
        fails, so the engine keeps its native eviction."""
        from . import _lib
        lib, err = _lib.load()
        if lib is None or not hasattr(lib, "recache_order_open"):
            self.logger.error("recache eviction steering DISABLED: shim library unavailable (%s)",
                              err)
            return False
        if self.handle is not None:
            return True
        handle = lib.recache_order_open(os.fsencode(path))
        if not handle:
            self.logger.error("recache eviction steering DISABLED: cannot open reader for %s",
                              path)
            return False
        self.lib, self.handle = lib, handle
        self.status_path = path + STATUS_SUFFIX
        self.write_status()
        return True

    def write_status(self) -> None:
        """Write ``ORDER.status`` (see the module doc); a failure is counted, never raised."""
        if self.status_path is None:
            return
        self.status_written = time.monotonic()
        body = {"engine": self.engine, "pid": os.getpid(), "fresh": self.fresh,
                "checked": self.checked > 0.0, "unix_ms": int(time.time() * 1000),
                **self.counts}
        tmp = f"{self.status_path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(body, f)
            os.replace(tmp, self.status_path)
        except OSError:
            self.status_errors += 1

    def is_fresh(self, refresh_s: float) -> bool:
        """Whether the order is fresh, re-checked at most every ``refresh_s``.

        An empty order is fresh when recache published it recently: a policy that ranks no
        kept blocks (LARU) publishes nothing once the engine holds exactly what it keeps.
        Calling that "stale" would log that recache stopped while it runs."""
        now = time.monotonic()
        if now - self.checked < refresh_s:
            return self.fresh
        self.checked = now
        st = ctypes.c_int32(2)
        # Freshness is the state alone (an empty order is fresh): count and generation unread.
        rc = self.lib.recache_order_refresh(self.handle, max_age_ms(), ctypes.byref(st),
                                            None, None)
        self.fresh = rc == 0 and st.value == 0
        if self.was_fresh and not self.fresh:
            self.counts["went_stale"] += 1
            self.logger.warning(
                "recache eviction order went stale (older than %d ms, missing or damaged: is "
                "recache running?); the engine's own eviction order decides until it is fresh "
                "again (went_stale=%d)", max_age_ms(), self.counts["went_stale"])
        elif self.fresh and not self.was_fresh and self.counts["went_stale"]:
            self.logger.info("recache eviction order fresh again; steering resumes")
        if self.fresh != self.was_fresh or now - self.status_written >= STATUS_EVERY_S:
            self.write_status()
        self.was_fresh = self.fresh
        return self.fresh

    def ranks(self, hashes):
        """Ranks of ``hashes`` (a ctypes u64 array, already masked) in the order, evict-first
        lowest and :data:`UNRANKED` for unlisted ones; None (an error counted) on failure."""
        out = (ctypes.c_uint64 * len(hashes))()
        if self.lib.recache_order_ranks(self.handle, hashes, len(hashes), out) != 0:
            self.counts["errors"] += 1
            return None
        return out

    def listed(self) -> Optional[array.array]:
        """The hashes the order last read lists, evict-first first (masked u64), copied out
        of the library only when that order changed; None (an error counted) on failure."""
        count, version = ctypes.c_uint64(0), ctypes.c_uint64(0)
        if self.lib.recache_order_hashes(self.handle, None, 0, ctypes.byref(count),
                                         ctypes.byref(version)) != 0:
            self.counts["errors"] += 1
            return None
        if version.value != self._listed_version:
            n = count.value
            buf = array.array("Q", bytes(8 * n))
            ptr = (ctypes.c_uint64 * n).from_buffer(buf) if n else None
            if self.lib.recache_order_hashes(self.handle, ptr, n, None, None) != 0:
                self.counts["errors"] += 1
                return None
            self._listed, self._listed_version = buf, version.value
        return self._listed

    def add_time(self, seconds: float) -> None:
        """Count ``seconds`` the plugin spent steering (``steer_s`` in stats and status)."""
        self.counts["steer_s"] += seconds

    def add_steered(self, n: int, log_every: int) -> bool:
        """Count ``n`` more steered units; True when the count crosses a multiple of
        ``log_every`` (the plugin then logs its stats)."""
        before = self.counts["steered"]
        self.counts["steered"] += n
        return before // log_every != self.counts["steered"] // log_every

    def error(self, e: BaseException) -> None:
        """Count a steering exception (the engine then uses its native order); warn for the
        first :data:`WARN_ERRORS`."""
        self.counts["errors"] += 1
        if self.counts["errors"] <= WARN_ERRORS:
            self.logger.warning("recache eviction steering error, native order used: %r", e)
