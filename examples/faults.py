#!/usr/bin/env python3
"""Engine faults on the real vLLM testbed, timed: prints one JSON object.

Two testbed replicas (fa, fb: one core each), recache in front with one --kv-events per
replica, `--routing prefix`, canaries every 1 s and health probes every 1 s. Light load
(one completion every 50 ms) runs throughout. Then:

1. replica fa is killed (SIGKILL, no grace): time until recache marks it unhealthy, and the
   failed requests while it is down (the survivor must serve);
2. fa is restarted on the same ports: time from the engine answering again until recache
   takes it back (goal: one health period) and until its routing mirror is `exact` again
   (goal: within 2 s of the publisher's return);
3. both replicas are killed: time until recache answers 503 (goal: within 1 s).

Usage: examples/faults.py [--recache target/release/recache]
Stdlib only; ~3 minutes with the engine starts.
"""

import argparse
import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTBED = os.path.join(ROOT, "examples", "testbed")


def up(name, core, extra=()):
    env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND=str(core))
    out = subprocess.run([os.path.join(TESTBED, "up"), "--name", name, *extra],
                         env=env, check=True, capture_output=True, text=True).stdout
    fields = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return fields, time.monotonic()


def down(name, grace=None):
    cmd = [os.path.join(TESTBED, "down"), "--name", name]
    if grace is not None:
        cmd += ["--timeout", str(grace)]
    subprocess.run(cmd, capture_output=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
    except Exception:  # noqa: BLE001 - a dead port is a result here
        return 0, {}


def post(url, body, timeout=30.0):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception:  # noqa: BLE001
        return 0


def upstreams(base):
    _, v = get_json(f"{base}/ready")
    return v.get("upstreams", [])


def wait_for(pred, timeout, step=0.02):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic()
        time.sleep(step)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recache", default=os.path.join(ROOT, "target/release/recache"))
    args = ap.parse_args()
    out = {"health_interval_s": 1.0, "canary_s": 1.0}
    fa, _ = up("fa", 0)
    fb, _ = up("fb", 1)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve = subprocess.Popen(
        [args.recache, "serve", "--listen", f"127.0.0.1:{port}",
         "--upstream", fa["UPSTREAM"], "--upstream", fb["UPSTREAM"],
         "--kv-events", fa["KV_EVENTS"], "--kv-events", fb["KV_EVENTS"],
         "--routing", "prefix", "--route-canary", "1s", "--health-interval", "1s"],
        env=dict(os.environ, RECACHE_LOG="warn"))
    stop = threading.Event()
    log = []  # (time, status)

    def load():
        i = 0
        while not stop.is_set():
            body = {"model": fa["MODEL"], "prompt": [10 + (i * 7 + t) % 3000 for t in range(64)],
                    "max_tokens": 1}
            log.append((time.monotonic(), post(f"{base}/v1/completions", body)))
            i += 1
            time.sleep(0.05)

    try:
        exact = lambda: [u.get("mirror") for u in upstreams(base)] == ["exact", "exact"]
        if wait_for(exact, 120, 0.2) is None:
            raise SystemExit(f"mirrors never both exact: {upstreams(base)}")
        worker = threading.Thread(target=load, daemon=True)
        worker.start()
        time.sleep(3)

        # 1. one replica killed
        # Timed from when `down` returns: the engine's processes are gone then.
        down("fa", grace=0)
        t_kill = time.monotonic()
        healthy_a = lambda: bool(upstreams(base)) and upstreams(base)[0].get("healthy")
        t_out = wait_for(lambda: not healthy_a(), 30)
        time.sleep(3)
        # 2. restarted on the same ports
        port_a = fa["UPSTREAM"].rsplit(":", 1)[1]
        ev_a = fa["KV_EVENTS"].rsplit(":", 1)[1]
        t_restart = time.monotonic()
        _, t_engine = up("fa", 0, ["--port", port_a, "--kv-events-port", ev_a])
        t_back = wait_for(healthy_a, 30)
        t_exact = wait_for(lambda: upstreams(base)[:1] and upstreams(base)[0].get("mirror") == "exact", 30)
        time.sleep(2)
        during = [s for t, s in log if t_kill <= t <= (t_back or time.monotonic())]
        stop.set()
        worker.join(timeout=60)
        # 3. no replica left
        down("fa", grace=0)
        down("fb", grace=0)
        t_all = time.monotonic()
        statuses = []
        t_503 = wait_for(lambda: statuses.append(post(f"{base}/v1/completions",
                                      {"model": fa["MODEL"], "prompt": "x", "max_tokens": 1},
                                      timeout=5)) or statuses[-1] == 503, 10)
        out.update({
            "kill_to_marked_unhealthy_s": round(t_out - t_kill, 3) if t_out else None,
            "requests_while_one_down": len(during),
            "failed_while_one_down": sum(1 for s in during if s != 200),
            "failed_statuses": sorted({s for s in during if s != 200}),
            "restart_engine_start_s": round(t_engine - t_restart, 1),
            "engine_ready_to_taken_back_s": round(t_back - t_engine, 3) if t_back else None,
            "engine_ready_to_mirror_exact_s": round(t_exact - t_engine, 3) if t_exact else None,
            "all_down_to_503_s": round(t_503 - t_all, 3) if t_503 else None,
            "answers_before_503": sorted(set(statuses[:-1])),
            "requests_total": len(log),
            "failed_total": sum(1 for _, s in log if s != 200),
        })
    finally:
        stop.set()
        serve.kill()
        serve.wait()
        down("fa", grace=0)
        down("fb", grace=0)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
