"""Every vLLM testbed engine computes with the same OpenMP threads, item pool or not.

vLLM 0.32's CPU worker reserves one core more for any --kv-transfer-config; on a 2-core
machine that left the item pool's engine 2 threads and a plain engine 1, and a comparison of
the two measured the threads, not the pool (docs/gr-throughput.md#the-thread-check). launch.py pins the reservation;
this checks the command lines it builds for a plain engine and a pool engine carry the same
one, and that a user's own VLLM_CPU_NUM_OF_RESERVED_CPU wins.

vLLM's automatic core binding also put every engine's worker on the same cores (two replicas
on one core of a 2-core machine); launch.cpu_bind spreads live instances over the cores.
This checks it on run dirs made here, and that pin.py pins an engine-core process (a
stand-in child named like vLLM's), every thread, and nothing else. Pure Python, no engine.
"""
import argparse, os, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import launch  # noqa: E402
import pin  # noqa: E402


def args(pool_bytes):
    return argparse.Namespace(
        model_dir="/m", served_model_name="tiny-qwen2", dtype="bfloat16", max_model_len=8192,
        kv_blocks=64, max_logprobs=200, item_pool_bytes=pool_bytes, item_pool_codec="bf16",
        pool_store_url="",
        pool_store_master="", pool_store_metadata="", extra=[])


def reserved(pool_bytes):
    cmd, env = launch.vllm_command(args(pool_bytes), 1, 2)
    assert ("--kv-transfer-config" in cmd) == (pool_bytes > 0), cmd
    return env["VLLM_CPU_NUM_OF_RESERVED_CPU"]


def main():
    os.environ.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
    plain, pool = reserved(0), reserved(65536)
    assert plain == pool == "1", (plain, pool)
    os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    assert reserved(0) == reserved(65536) == "0"
    print("testbed threads: plain and item pool engines reserve the same cores: ok")
    check_bind()
    check_pin()


def check_bind():
    os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
    os.environ.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as root:
        runs = [os.path.join(root, n) for n in ("a", "b", "c")]
        for r in runs:
            os.makedirs(r)
        a = launch.cpu_bind(runs[0])
        b = launch.cpu_bind(runs[1])  # a is still starting: cores chosen, no pid yet
        want = max(1, len(cpus) - 1)
        assert len(a.split(",")) == len(b.split(",")) == want, (a, b)
        if len(cpus) >= 2:
            assert a.split(",")[0] != b.split(",")[0], f"two live engines start on one core: {a} {b}"
        # A dead instance's cores are free again: c may take a's.
        with open(os.path.join(runs[0], "pid"), "w") as f:
            f.write("999999999\n")
        with open(os.path.join(runs[1], "pid"), "w") as f:
            f.write(f"{os.getpid()}\n")  # alive
        c = launch.cpu_bind(runs[2])
        assert c.split(",")[0] != b.split(",")[0], (b, c)
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "0-1"
        assert launch.cpu_bind(runs[2]) == "0-1", "a user's own binding wins"
        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND")
    print(f"testbed cores: live engines spread over CPUs {cpus} ({a} then {b}): ok")


def check_pin():
    """pin.pin_engine_core pins every thread of a child named like vLLM's engine core (and
    nothing else) to the given cores; a spec naming no fixed cores pins nothing."""
    assert pin.parse_cpus("0,2-3") == [0, 2, 3]
    assert pin.parse_cpus("auto") is None and pin.parse_cpus("0-1|2-3") is None
    cpus = sorted(os.sched_getaffinity(0))
    child = ("import threading, time\n"
             "open('/proc/self/comm', 'w').write('VLLM::EngineCor')\n"
             "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
             "print('ready', flush=True)\n"
             "time.sleep(60)\n")
    other = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    core = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        for p in (other, core):
            assert p.stdout.readline().strip() == "ready"  # both threads started
        os.environ.pop("RECACHE_TESTBED_PIN_ENGINE_CORE", None)
        assert pin.pin_engine_core(os.getpid(), "auto") == []
        pinned = pin.pin_engine_core(os.getpid(), str(cpus[-1]))
        assert pinned == [core.pid], (pinned, core.pid, other.pid)
        tids = os.listdir(f"/proc/{core.pid}/task")
        assert len(tids) >= 2, tids
        for tid in tids:
            assert os.sched_getaffinity(int(tid)) == {cpus[-1]}, (tid, os.sched_getaffinity(int(tid)))
        assert os.sched_getaffinity(other.pid) == set(cpus), "only the engine core is pinned"
        os.environ["RECACHE_TESTBED_PIN_ENGINE_CORE"] = "0"
        assert pin.pin_engine_core(os.getpid(), str(cpus[0])) == [], "turned off"
        os.environ.pop("RECACHE_TESTBED_PIN_ENGINE_CORE")
    finally:
        for p in (other, core):
            p.kill()
            p.wait()
    print(f"testbed engine core: pinned with its worker (CPU {cpus[-1]}), every thread: ok")


if __name__ == "__main__":
    main()
