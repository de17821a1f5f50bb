"""The cold tier's store clients: Mooncake Store and Redis (Valkey) behind the same narrow
interface (``get``, ``get_many``, ``put``, ``close``), and :class:`LazyStore`, which sets a
client up off the request path, follows the store's address (a store that goes and comes back
gets a new client at once) and replaces a client whose call hung. docs/store.md compares the
two stores and says why the engine test runs on Redis.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

logger = logging.getLogger("recache_shim.item_cold")


class MooncakeStore:
    """Mooncake Store's client (``mooncake-transfer-engine-non-cuda``; examples/store/install)."""

    def __init__(self, local: str, metadata: str, master: str, segment_bytes: int = 16 << 20,
                 buffer_bytes: int = 16 << 20, protocol: str = "tcp"):
        from mooncake.store import MooncakeDistributedStore

        self.client = MooncakeDistributedStore()
        rc = self.client.setup(local, metadata, segment_bytes, buffer_bytes, protocol, "", master)
        if rc != 0:
            raise ConnectionError(f"Mooncake Store setup failed ({rc}) at master {master}")

    def get(self, key: str) -> bytes | None:
        return self.client.get(key) or None

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        """One batched round trip (``get_batch``); a missing key reads as empty bytes."""
        return [b or None for b in self.client.get_batch(list(keys))]

    def put(self, key: str, value: bytes) -> None:
        rc = self.client.put(key, value)
        if rc != 0:
            raise IOError(f"Mooncake put {key}: {rc}")

    def close(self) -> None:
        """Unmounts this client's segment (before its master goes, or the master logs it)."""
        self.client.close()


class RedisStore:
    """Redis (or Valkey) as the store (``redis==8.1.0``, examples/store/install): one server
    holds every value, so a read is one round trip to it, with no transfer between the
    engines (docs/store.md says when to prefer it to Mooncake)."""

    def __init__(self, url: str):
        import redis

        self.client = redis.Redis.from_url(url, socket_connect_timeout=2.0, socket_timeout=5.0)
        self.client.ping()  # fails here, inside the set-up, when nothing answers

    def get(self, key: str) -> bytes | None:
        return self.client.get(key) or None

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        return [b or None for b in self.client.mget(list(keys))]

    def put(self, key: str, value: bytes) -> None:
        self.client.set(key, value)

    def close(self) -> None:
        self.client.close()


def store_address(cfg: dict) -> str:
    """The store's ``host:port`` (Mooncake's master, or the Redis server of ``url``)."""
    url = str(cfg.get("url") or "")
    if url:
        return url.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
    return str(cfg.get("master") or "")


def store_from_config(cfg: dict):
    """The client the connector's ``store`` config names: ``url`` (redis://host:port) for
    Redis, else ``master`` (and ``metadata``) for Mooncake Store."""
    if cfg.get("url"):
        return RedisStore(str(cfg["url"]))
    return mooncake_from_config(cfg)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def mooncake_from_config(cfg: dict) -> MooncakeStore:
    """The client the connector's ``store`` config names (``local`` without a port: a free
    one; ``segment_bytes``: memory this engine lends the store; ``buffer_bytes``: the client's
    transfer buffer, which a step's batch of cold values must fit)."""
    local = str(cfg.get("local") or "127.0.0.1")
    if ":" not in local:
        local = f"{local}:{free_port(local)}"
    return MooncakeStore(local, str(cfg.get("metadata", "")), str(cfg["master"]),
                         segment_bytes=int(cfg.get("segment_bytes", 64 << 20)),
                         buffer_bytes=int(cfg.get("buffer_bytes", 64 << 20)))


class LazyStore:
    """A store whose client ``make()`` builds on the first call that needs it. Calls run on
    :class:`ColdTier`'s threads, so a set-up that hangs or fails costs a request no more than
    the tier's bound; a failure is logged once and tried again after ``retry_s``."""

    # Calls failing in a row before the client is dropped and set up again: a store that
    # restarted (empty, perhaps elsewhere) is not reached through the old client's state.
    RESET_AFTER = 8
    # A call running this long has hung (a fetch is bounded far below it; a put at 2 s).
    HANG_S = 5.0
    # How often the watch tries a set-up while the store answers and no client is set up.
    WATCH_RETRY_S = 5.0

    def __init__(self, make, retry_s: float = 30.0):
        self.make, self.retry_s = make, retry_s
        self.client = None
        self.failed_at: float | None = None
        self.warned = False
        self.lock = threading.RLock()
        # Notified on every change of client or calls in flight: what waiting callers (the
        # tests) wait on instead of polling.
        self.changed = threading.Condition(self.lock)
        self.connects = 0  # successful set-ups so far
        self.losses = 0  # times the watch saw the store stop answering
        self.failing = 0  # calls failed in a row on the current client
        self.inflight: dict = {}  # call -> (client, started): what `hung` looks at

    def connect(self):
        with self.lock:
            if self.client is not None:
                return self.client
            if self.failed_at is not None and time.monotonic() - self.failed_at < self.retry_s:
                raise ConnectionError("the store's client is not set up (retried later)")
            try:
                self.client = self.make()
            except Exception as e:
                self.failed_at = time.monotonic()
                if not self.warned:
                    self.warned = True
                    logger.warning("recache item pool: store client set-up failed (%s); cold "
                                   "items are computed until it works (retry every %.0f s)",
                                   e, self.retry_s)
                raise
            self.failed_at = None
            self.connects += 1
            self.failing = 0
            self.changed.notify_all()
            logger.info("recache item pool: store client set up")
            return self.client

    def _use(self, fn):
        c = self.connect()
        call = object()
        with self.lock:
            self.inflight[call] = (c, time.monotonic())
            self.changed.notify_all()
        try:
            out = fn(c)
        except Exception:
            self._failed(c)
            raise
        finally:
            with self.lock:
                self.inflight.pop(call, None)
        self.failing = 0
        return out

    def wait_until(self, pred, timeout_s: float) -> bool:
        """Waits until ``pred()`` holds, re-checked on every change (or ``timeout_s``)."""
        with self.changed:
            return self.changed.wait_for(pred, timeout_s)

    def hung(self) -> bool:
        """Drops the client when one of its calls has run longer than ``HANG_S`` (seen here:
        a transfer from another client's segment that never completed, after which that
        client read nothing more); the call keeps its thread, the client is not closed (its
        close could hang too), and the next call sets up a new one. Whether it dropped one."""
        now = time.monotonic()
        with self.lock:
            stuck = [c for c, t0 in self.inflight.values()
                     if c is self.client and now - t0 > self.HANG_S]
            if not stuck:
                return False
            self.client, self.failing = None, 0
            self.changed.notify_all()
        logger.warning("recache item pool: a store call has hung for over %.0f s; setting "
                       "the client up again", self.HANG_S)
        return True

    def _failed(self, c) -> None:
        with self.lock:
            if self.client is not c:
                return
            self.failing += 1
            if self.failing < self.RESET_AFTER:
                return
            self.client, self.failing = None, 0
            self.changed.notify_all()
        logger.warning("recache item pool: %d store calls failed in a row; setting the client "
                       "up again", self.RESET_AFTER)
        try:
            c.close()
        except Exception:  # the old client's store is gone: nothing to unmount
            pass

    def reset(self) -> None:
        """Drops the client (the next call sets one up): its store went away."""
        with self.lock:
            c, self.client, self.failing, self.failed_at = self.client, None, 0, None
            self.changed.notify_all()
        if c is not None:
            try:
                c.close()
            except Exception:  # the old client's store is gone: nothing to unmount
                pass

    def _try_connect(self) -> None:
        """The watch's set-up: a failure is logged by ``connect`` and tried again later (by
        calls, or the watch's next retry)."""
        try:
            self.connect()
        except Exception:
            pass

    def watch(self, addr: str, every_s: float = 1.0) -> None:
        """Follows the store's address (a TCP connect every ``every_s``, on this thread,
        forever): when it stops answering the client is dropped, and when it answers again a
        new one is set up at once, so a restarted store (empty; it knows no client) is used
        again without waiting for calls to fail."""
        host, _, port = addr.rpartition(":")
        up = None
        tried = 0.0
        while True:
            try:
                socket.create_connection((host or "127.0.0.1", int(port)), timeout=0.5).close()
                now = True
            except (OSError, ValueError):
                now = False
            if now != up:
                if up and not now:
                    with self.lock:
                        self.losses += 1
                if up is not None:
                    logger.warning("recache item pool: store %s %s", addr,
                                   "is back; setting the client up" if now else
                                   "stopped answering; cold items are computed")
                if up is not None or not now:
                    self.reset()
                if now:
                    self._try_connect()
                up = now
            if now and self.hung():
                self._try_connect()
            elif now and self.client is None and time.monotonic() - tried >= self.WATCH_RETRY_S:
                # The store answers but calls dropped the client and a set-up failed while it
                # was away, unseen here (this thread waited on the lock behind that set-up):
                # set one up now rather than after the calls' `retry_s`, which a quiet
                # replica never reaches (on the testbed it stayed without a client).
                tried = time.monotonic()
                with self.lock:
                    self.failed_at = None
                self._try_connect()
            time.sleep(every_s)  # a poll interval, not a wait for an event we could get

    def get(self, key: str):
        return self._use(lambda c: c.get(key))

    def get_many(self, keys: list[str]):
        return self._use(lambda c: c.get_many(keys) if hasattr(c, "get_many")
                         else [c.get(k) for k in keys])

    def put(self, key: str, value: bytes):
        return self._use(lambda c: c.put(key, value))

    def close(self) -> None:
        if not self.lock.acquire(timeout=5.0):  # a set-up still hangs: leave it to the exit
            return
        try:
            client, self.client = self.client, None
        finally:
            self.lock.release()
        if client is not None and hasattr(client, "close"):
            client.close()
