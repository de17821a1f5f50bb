#!/usr/bin/env python3
"""Runs the store a render of charts/recache puts in the chart (itemPool.store.valkey) with
its rendered flags, and reaches it through the client the engines' connector builds from its
rendered config (recache_shim.item_cold_clients.store_from_config): the flags must start the
server and configure what values.yaml says, and the connector's config must name a store its
client can use. REDIS_SERVER stands in for valkey-server (Valkey 8 takes the same flags as
Redis 7); the port and --dir are moved to this machine, and it listens on loopback. Then the store is made
small and written past full: allkeys-lru must evict, not refuse the connector's writes.
Run with a Python that has redis-py and recache_shim on its path. Exits 1 on any problem.

Usage: store_live.py REDIS_SERVER LIVE.jsonl (store_wiring.py --live-out: per render, its
Valkey container and its engines' store config)
"""
import json
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time

import redis
from recache_shim.item_cold_clients import store_from_config


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Redis/Valkey memory units: 1k = 1000, 1kb = 1024, likewise m and g.
UNITS = {"": 1, "k": 10**3, "kb": 2**10, "m": 10**6, "mb": 2**20, "g": 10**9, "gb": 2**30}


def memory_bytes(spec):
    m = re.fullmatch(r"(\d+)([kmg]b?)?", spec.lower())
    return int(m.group(1)) * UNITS[m.group(2) or ""]


def check(server, where, valkey, store):
    port, args = free_port(), list(valkey["args"])
    args[args.index("--port") + 1] = str(port)
    with tempfile.TemporaryDirectory() as data, tempfile.TemporaryFile() as log:
        args[args.index("--dir") + 1] = data
        # Loopback only here: the rendered server has no password.
        proc = subprocess.Popen([server, *args, "--bind", "127.0.0.1"], stdout=log, stderr=log)
        try:
            admin = redis.Redis(port=port)
            for _ in range(100):
                try:
                    admin.ping()
                    break
                except redis.ConnectionError:
                    if proc.poll() is not None:
                        log.seek(0)
                        raise SystemExit(f"{where}: {server} {args} exited:\n{log.read().decode()}")
                    time.sleep(0.05)
            conf = admin.config_get("*")
            for flag in ("maxmemory-policy", "appendonly", "save"):
                want = args[args.index(f"--{flag}") + 1]
                assert conf[flag] == want, f"{flag}: {conf[flag]!r}, rendered {want!r}"
            want = memory_bytes(args[args.index("--maxmemory") + 1])
            assert int(conf["maxmemory"]) == want > 0, f"maxmemory {conf['maxmemory']}, not {want}"
            # The connector's own client, from the rendered config moved to this machine.
            url = store["url"]
            host_port = url.removeprefix("redis://").split("/")[0]
            client = store_from_config({**store, "url": url.replace(host_port, f"127.0.0.1:{port}")})
            admin.config_set("maxmemory", 4 << 20)
            value = bytes(64 << 10)
            for i in range(256):  # 16 MiB into 4: each put must succeed
                client.put(f"item-{i}", value)
            kept = admin.dbsize()
            assert 0 < kept < 256 and client.get("item-255") == value, f"{kept} of 256 kept"
            client.close()
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"[store] {where}: {shlex.join(valkey['command'] + valkey['args'])} started "
          f"(as {server}); the connector's client wrote 16 MiB into 4, the store evicted "
          f"{256 - kept} of 256 entries and refused none", file=sys.stderr)


def main():
    n = 0
    for line in open(sys.argv[2]):
        x = json.loads(line)
        check(sys.argv[1], x["where"], x["valkey"], x["store"])
        n += 1
    assert n, f"{sys.argv[2]}: no render with the chart's Valkey"


if __name__ == "__main__":
    main()
