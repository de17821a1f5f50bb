#!/usr/bin/env python3
"""Owns a tiny KV-events subscriber for checking a testbed (or any vLLM) instance.

Run with the testbed venv's Python (pyzmq and msgspec come with vLLM):
  $RECACHE_TESTBED_HOME/venv-vllm/bin/python examples/testbed/kv_events_probe.py \
      tcp://127.0.0.1:PORT --count 3 --timeout 30
vLLM binds a ZMQ PUB socket (endpoint `tcp://*:PORT`); we connect a SUB socket.
Each message is 3 frames: topic (b"kv"), 8-byte big-endian sequence number, and a
msgpack payload `[ts, [event, ...], dp_rank]`. Each event is a msgpack *map* tagged by
`"type"` ("BlockStored", "BlockRemoved", "AllBlocksCleared"). Prints one JSON line per
batch on stdout; exits 1 if fewer than --count batches arrive within --timeout seconds.
Decoded generically (no vLLM import) so the output shows the wire format as-is.
Works for SGLang too (run it with venv-sglang's Python): same frames, token-granular blocks.
`--raw` adds the frames as hex (`frames_hex`), for captured-frame decoder tests.
"""
import argparse, json, os, sys, time

import msgspec
import zmq


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("endpoint", nargs="?", default=os.environ.get("KV_EVENTS"),
                    help="e.g. tcp://127.0.0.1:5557 (default: $KV_EVENTS)")
    ap.add_argument("--count", type=int, default=1, help="batches to wait for (0 = forever)")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds")
    ap.add_argument("--topic", default="", help="subscription prefix (default: all)")
    ap.add_argument("--raw", action="store_true", help="also print the frames as hex")
    a = ap.parse_args()
    if not a.endpoint:
        ap.error("no endpoint given and $KV_EVENTS is unset")
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, a.topic.encode())
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(a.endpoint)
    got, deadline = 0, time.time() + a.timeout
    while a.count == 0 or got < a.count:
        left = deadline - time.time()
        if a.count and left <= 0:
            print(f"[probe] only {got}/{a.count} batches from {a.endpoint} in {a.timeout}s",
                  file=sys.stderr)
            return 1
        if not sub.poll(timeout=int(max(left, 0) * 1000) if a.count else None):
            continue
        frames = sub.recv_multipart()
        topic, seq, payload = frames[0], frames[1], frames[-1]
        batch = msgspec.msgpack.decode(payload)
        out = {"topic": topic.decode(errors="replace"), "seq": int.from_bytes(seq, "big", signed=True),
               "frames": len(frames), "ts": batch[0], "events": batch[1],
               "dp_rank": batch[2] if len(batch) > 2 else None}
        if a.raw:
            out["frames_hex"] = [f.hex() for f in frames]
        print(json.dumps(out), flush=True)
        got += 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
