"""Measure before choosing (issue 46): item-KV fills and fetches through Redis and Mooncake
Store on this machine, beside a local host-memory copy and the engine recomputing the item.

Run with the store venv (examples/store/install prints it):
    $VENV/bin/python examples/store/measure.py --json > docs/data/store-choice.json

Each store is started here on loopback ports and stopped at the end (redis-server from PATH,
mooncake_master from the venv). A "replica" fills items (one value per item: its K/V of every
layer, as the pool's entry holds it) and a second client, as another replica would, fetches the
candidates of a ranking request (--items-per-request random stored items, one batched call).
Mooncake's data lives in the holder's mounted segment (a separate process), so every fetch
crosses its TCP transport; Redis serves from its server process. Every fetched value is
compared byte for byte with what was filled (mismatches counted). Loopback: the numbers are the
stores' software cost on this host, not a network's.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, what: str, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """Until ``port`` accepts, within ``timeout``; between tries it waits for ``proc`` to
    exit (the other event it needs: a server that died is an error at once)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            pass
        try:
            rc = proc.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            continue
        raise SystemExit(f"[store] {what} exited with {rc} before listening")
    raise SystemExit(f"[store] {what} did not listen on port {port} within {timeout:.0f} s")


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round((len(s) - 1) * q))] if s else float("nan")


def value_of(key: int, nbytes: int) -> bytes:
    """Deterministic, key-dependent bytes (a fetched value names the item it belongs to)."""
    return random.Random(key).randbytes(nbytes)


class Redis:
    name = "redis"

    def __init__(self, venv_bin: Path):
        import redis
        port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port, "redis-server", self.proc)
        self.filler = redis.Redis(host="127.0.0.1", port=port)
        self.reader = redis.Redis(host="127.0.0.1", port=port)
        self.version = self.filler.info()["redis_version"]

    def put(self, key: str, val: bytes) -> None:
        self.filler.set(key, val)

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        return self.reader.mget(keys)

    def memory(self) -> int:
        return int(self.filler.info("memory")["used_memory"])

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


class Mooncake:
    name = "mooncake"

    def __init__(self, venv_bin: Path, segment: int):
        from mooncake.store import MooncakeDistributedStore
        rpc, meta = free_port(), free_port()
        self.proc = subprocess.Popen(
            [str(venv_bin / "mooncake_master"), f"--rpc_port={rpc}",
             "--enable_http_metadata_server=true", f"--http_metadata_server_port={meta}",
             "--http_metadata_server_host=127.0.0.1", "--default_kv_lease_ttl=600000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(rpc, "mooncake_master", self.proc)
        wait_port(meta, "mooncake_master's metadata server", self.proc)
        cfg = dict(metadata=f"http://127.0.0.1:{meta}/metadata", master=f"127.0.0.1:{rpc}",
                   holder=f"127.0.0.1:{free_port()}")
        # The holder mounts the segment every item lives in; the reader mounts almost none.
        self.holder = subprocess.Popen(
            [sys.executable, __file__, "--mooncake-holder", json.dumps({**cfg, "segment": segment})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if (self.holder.stdout.readline().strip() if self.holder.stdout else "") != "ready":
            raise SystemExit("[store] the Mooncake holder process did not start")
        self.client = MooncakeDistributedStore()
        rc = self.client.setup(f"127.0.0.1:{free_port()}", cfg["metadata"], 16 << 20,
                               segment, "tcp", "", cfg["master"])
        if rc != 0:
            raise SystemExit(f"[store] Mooncake client setup failed ({rc})")
        from mooncake.store import ReplicateConfig
        self.config = ReplicateConfig()
        self.config.preferred_segment = cfg["holder"]
        self.version = "mooncake-transfer-engine-non-cuda " + _dist_version()

    def put(self, key: str, val: bytes) -> None:
        rc = self.client.put(key, val, self.config)
        if rc != 0:
            raise RuntimeError(f"mooncake put {key}: {rc}")

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        return [v if v else None for v in self.client.get_batch(keys)]

    def memory(self) -> int | None:
        return None  # the master does not report used bytes through this client

    def close(self) -> None:
        self.client.close()
        for p in (self.holder, self.proc):
            p.terminate()
            p.wait(timeout=10)


class MooncakeInto:
    """The same Mooncake Store read the way a pool would: ``batch_get_into`` a buffer
    registered with the transfer engine once (no Python ``bytes`` per item)."""

    name = "mooncake-into"

    def __init__(self, mc: Mooncake, slots: int, slot_bytes: int):
        import ctypes
        self.mc, self.version = mc, mc.version + " (batch_get_into)"
        self.slot = slot_bytes
        self.buf = ctypes.create_string_buffer(slots * slot_bytes)
        self.ptr = ctypes.addressof(self.buf)
        if mc.client.register_buffer(self.ptr, slots * slot_bytes) != 0:
            raise SystemExit("[store] Mooncake register_buffer failed")

    def put(self, key: str, val: bytes) -> None:
        self.mc.put(key, val)

    def get_many(self, keys: list[str]) -> list[int]:
        """Sizes read into the buffer's slots (< 0: not found); :meth:`values` copies them out."""
        ptrs = [self.ptr + i * self.slot for i in range(len(keys))]
        return self.mc.client.batch_get_into(keys, ptrs, [self.slot] * len(keys))

    def values(self, sizes: list[int]) -> list[bytes | None]:
        import ctypes
        return [ctypes.string_at(self.ptr + i * self.slot, n) if n > 0 else None
                for i, n in enumerate(sizes)]

    def memory(self) -> None:
        return None

    def close(self) -> None:
        self.mc.client.unregister_buffer(self.ptr)


def _dist_version() -> str:
    from importlib.metadata import version
    return version("mooncake-transfer-engine-non-cuda")


def holder(cfg_json: str) -> None:
    from mooncake.store import MooncakeDistributedStore
    cfg = json.loads(cfg_json)
    s = MooncakeDistributedStore()
    rc = s.setup(cfg["holder"], cfg["metadata"], cfg["segment"], 16 << 20, "tcp", "",
                 cfg["master"])
    print("ready" if rc == 0 else f"failed {rc}", flush=True)
    sys.stdin.read()  # the parent's pipe: held until it closes it or ends


def local_get_many(table: dict[str, bytes], keys: list[str]) -> list[bytes]:
    """The local pool's path: the host copies each entry (bytes() of a memoryview copies)."""
    return [bytes(memoryview(table[k])) for k in keys]


def run_one(store, size: int, args, rng: random.Random, rnd: int) -> dict:
    name = store.name if store else "local"
    keys = [f"{name}/r{rnd}/item{size}-{i}" for i in range(args.items)]
    vals = {k: value_of(hash((size, i)) & 0xFFFFFFFF, size) for i, k in enumerate(keys)}
    t0 = time.perf_counter()
    put_ms = []
    for k in keys:
        t = time.perf_counter()
        store.put(k, vals[k]) if store else None
        put_ms.append((time.perf_counter() - t) * 1e3)
    fill_s = time.perf_counter() - t0
    req_ms, mismatches, missing = [], 0, 0
    for _ in range(args.requests):
        want = rng.sample(keys, args.items_per_request)
        t = time.perf_counter()
        got = store.get_many(want) if store else local_get_many(vals, want)
        req_ms.append((time.perf_counter() - t) * 1e3)
        if hasattr(store, "values"):  # read into a buffer: copied out for the check, unclocked
            got = store.values(got)
        for k, v in zip(want, got):
            missing += v is None
            mismatches += v is not None and v != vals[k]
    total = args.requests * args.items_per_request * size
    row = {
        "store": name,
        "item_bytes": size,
        "items": args.items,
        "items_per_request": args.items_per_request,
        "put_p50_ms": pct(put_ms, 0.5),
        "fill_mb_per_s": args.items * size / fill_s / 1e6,
        "request_fetch_p50_ms": pct(req_ms, 0.5),
        "request_fetch_p99_ms": pct(req_ms, 0.99),
        "fetch_gb_per_s": total / (sum(req_ms) / 1e3) / 1e9,
        "per_item_fetch_us": pct(req_ms, 0.5) * 1e3 / args.items_per_request,
        "mismatches": mismatches,
        "missing": missing,
    }
    if store:
        # Everything the store holds so far (earlier rounds' and sizes' items too).
        row["store_memory_bytes"] = store.memory()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--item-bytes", default="38912,293888",
                    help="K/V bytes of one item, comma-separated (default: 19 tokens x 2 KiB, the "
                    "testbed's; 287 KiB, BAT's Industry set: 287 GB for 1M items)")
    ap.add_argument("--items", type=int, default=1000, help="items filled per size")
    ap.add_argument("--items-per-request", type=int, default=100)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stores", default="local,redis,mooncake,mooncake-into",
                    help="mooncake-into: the same Mooncake Store read with batch_get_into a "
                    "registered buffer, as a pool would (after mooncake)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="one JSON row per store x size x round")
    ap.add_argument("--recompute-tokens-per-s", type=float, default=876.0,
                    help="the engine's prefill rate, to price computing an item instead (default: "
                    "the bf16 testbed at saturation on the AMD EPYC VM, docs/data/"
                    "gr-beauty-1gib-sat60-epyc.json: UP computed 196,491 tokens in 60 requests "
                    "at 0.2675/s)")
    ap.add_argument("--kv-bytes-per-token", type=int, default=2048,
                    help="an item's K/V bytes per token (default: the testbed's)")
    ap.add_argument("--mooncake-holder", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mooncake_holder:
        return holder(args.mooncake_holder)
    if not shutil.which("redis-server") and "redis" in args.stores:
        raise SystemExit("[store] redis-server not on PATH: run examples/store/install")
    venv_bin = Path(sys.executable).parent
    sizes = [int(s) for s in args.item_bytes.split(",")]
    names = args.stores.split(",")
    segment = int(sum(sizes) * args.items * args.repeat * 2.5) + (64 << 20)
    stores = {}
    try:
        for n in names:
            if n == "redis":
                stores[n] = Redis(venv_bin)
            elif n == "mooncake":
                stores[n] = Mooncake(venv_bin, segment)
            elif n == "mooncake-into":
                if "mooncake" not in stores:
                    raise SystemExit("[store] --stores: mooncake-into comes after mooncake")
                stores[n] = MooncakeInto(stores["mooncake"], args.items_per_request, max(sizes))
            elif n != "local":
                raise SystemExit(f"[store] --stores: unknown store {n!r} "
                                 "(local, redis, mooncake, mooncake-into)")
        rng = random.Random(args.seed)
        rows = []
        for r in range(1, args.repeat + 1):
            # Interleaved: every store at every size in each round, the order rotated.
            order = names[r % len(names):] + names[:r % len(names)]
            for size in sizes:
                for n in order:
                    row = run_one(stores.get(n), size, args, rng, r)
                    row["round"] = r
                    row["version"] = getattr(stores.get(n), "version", "python bytes copy")
                    rows.append(row)
                    print(json.dumps(row) if args.json else row, flush=True)
                    print(f"[store] round {r} {n} {size} B: fetch p50 "
                          f"{row['request_fetch_p50_ms']:.2f} ms", file=sys.stderr)
        for row in summaries(rows, args):
            print(json.dumps(row) if args.json else row, flush=True)
    finally:
        for s in reversed(list(stores.values())):  # a buffer before its client
            s.close()


def summaries(rows: list[dict], args) -> list[dict]:
    """Per store and size: medians over rounds (min-max in *_range), and the price of
    computing the item instead, at the engine's prefill rate."""
    out = []
    for key in sorted({(r["store"], r["item_bytes"]) for r in rows}):
        group = [r for r in rows if (r["store"], r["item_bytes"]) == key]
        row = {"summary": True, "store": key[0], "item_bytes": key[1], "rounds": len(group)}
        for f in ("put_p50_ms", "fill_mb_per_s", "request_fetch_p50_ms", "request_fetch_p99_ms",
                  "fetch_gb_per_s", "per_item_fetch_us"):
            vals = sorted(r[f] for r in group)
            row[f] = vals[len(vals) // 2] if len(vals) % 2 else sum(vals[len(vals) // 2 - 1:len(vals) // 2 + 1]) / 2
            row[f + "_range"] = [vals[0], vals[-1]]
        row["mismatches"] = sum(r["mismatches"] for r in group)
        row["missing"] = sum(r["missing"] for r in group)
        tokens = key[1] / args.kv_bytes_per_token
        row["recompute_per_item_us"] = tokens / args.recompute_tokens_per_s * 1e6
        row["fetch_vs_recompute"] = row["per_item_fetch_us"] / row["recompute_per_item_us"]
        out.append(row)
    return out


if __name__ == "__main__":
    main()
