#!/usr/bin/env python3
"""A stand-in engine for charts/check's metric scrape: just enough of vLLM's surface that a
recache in front of it counts every metric family it has, so the dashboard's queries can be
checked against a real /metrics. Not an engine and not a test of recache's behaviour.

HTTP (one server per --http PORT): GET /health, GET /v1/models, POST /tokenize (bytes as
token ids), POST /v1/completions (a one-token completion whose `kv_transfer_params` has an
item-pool report that holds nothing, so pooled items are dropped as `engine` evictions).
ZMQ (one PUB socket per --zmq PORT, needs pyzmq + msgpack): vLLM-format KV event batches
with a stored block, a removal of an unknown block, sequence gaps and restarts, so the
mirrors count batches, apply issues and resyncs. Runs until killed or --seconds pass.
"""
import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    model = "standin"

    def log_message(self, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.send_json(200, {})
        elif self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "not_found"}})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            req = json.loads(raw or b"{}")
        except ValueError:
            req = {}
        if self.path == "/tokenize":
            tokens = [10 + b % 200 for b in str(req.get("prompt", "")).encode()]
            self.send_json(200, {"tokens": tokens, "count": len(tokens), "max_model_len": 4096})
        elif self.path == "/v1/completions":
            prompt = req.get("prompt")
            n = len(prompt) if isinstance(prompt, list) else 1
            labels = req.get("logprob_token_ids") or []
            logprobs = None
            if labels:  # a scoring call: one log-probability per label, the first one best
                top = {f"token_id:{t}": -1.0 - k for k, t in enumerate(labels)}
                logprobs = {"tokens": [f"token_id:{labels[0]}"], "token_logprobs": [-1.0],
                            "top_logprobs": [top], "text_offset": [0]}
            self.send_json(200, {
                "id": "cmpl-standin", "object": "text_completion", "model": self.model,
                "choices": [{"index": 0, "text": "", "logprobs": logprobs,
                             "finish_reason": "length"}],
                "usage": {"prompt_tokens": n, "completion_tokens": 1, "total_tokens": n + 1,
                          "prompt_tokens_details": {"cached_tokens": 0}},
                "kv_transfer_params": {"recache_pool": {"present": [], "list": []}},
            })
        else:
            self.send_json(404, {"error": {"message": "not found", "type": "not_found"}})


def publish(port, stop):
    import msgpack
    import zmq

    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.bind(f"tcp://127.0.0.1:{port}")
    seq, i = 0, 0
    while not stop.is_set():
        tokens = [(i * 7 + t) % 1000 for t in range(32)]
        events = [
            {"type": "BlockStored", "block_hashes": [1000 + i], "parent_block_hash": None,
             "token_ids": tokens, "block_size": 32, "lora_id": None, "medium": "GPU"},
            {"type": "BlockRemoved", "block_hashes": [10**9 + i], "medium": "GPU"},
        ]
        payload = msgpack.packb([time.time(), events, 0])
        sock.send_multipart([b"kv", seq.to_bytes(8, "big"), payload])
        i += 1
        # Mostly in order; every 5th batch skips one (a gap), every 20th starts over (a restart).
        seq = 0 if i % 20 == 0 else seq + (2 if i % 5 == 0 else 1)
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--http", type=int, action="append", default=[])
    ap.add_argument("--zmq", type=int, action="append", default=[])
    ap.add_argument("--model", default="standin")
    ap.add_argument("--seconds", type=float, default=120.0)
    a = ap.parse_args()
    Handler.model = a.model
    stop = threading.Event()
    for port in a.http:
        srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    for port in a.zmq:
        threading.Thread(target=publish, args=(port, stop), daemon=True).start()
    stop.wait(a.seconds)
    stop.set()


if __name__ == "__main__":
    main()
