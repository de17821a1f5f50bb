"""Owns pinning a vLLM CPU instance's engine-core process to its worker's cores.

vLLM 0.32's CPU engine runs the scheduler (`VLLM::EngineCore`) and the model
(`VLLM::Worker_TP0`) in two processes that talk through a shared-memory queue whose reader
spin-waits (`shm_broadcast.SpinCondition`: `sched_yield` in a loop for up to a second after
each read). vLLM binds the worker to its cores (VLLM_CPU_OMP_THREADS_BIND) but leaves the
engine core free, so with two replicas on a 2-core machine each engine core spins on the
*other* replica's core while its own worker computes: measured at 71-295 ms of CPU a request
(docs/peers.md, "Each replica on its own core"), taken from whichever replica shares the core,
and what scattered the rounds. On its own worker's core the spin yields to that worker (the
only other runnable task there), so it costs its own replica little and the other none.

Applied to every testbed vLLM instance alike (so every system a bench compares gets it);
`RECACHE_TESTBED_PIN_ENGINE_CORE=0` turns it off.
"""
import os


def parse_cpus(spec):
    """`0,2-3` -> [0, 2, 3]; None for what vLLM also accepts but names no fixed cores
    (`auto`, `nobind`, several ranks' lists split by `|`)."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out or None


def children(pid):
    """Every live descendant of `pid` (through /proc's per-thread children lists)."""
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):
                continue
            for k in kids:
                if k not in seen:
                    seen.append(k)
                    todo.append(k)
    return seen


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def pin_engine_core(server_pid, bind):
    """Pins every thread of the engine-core processes under `server_pid` to the cores in
    `bind` (the worker's VLLM_CPU_OMP_THREADS_BIND). Returns the pids pinned; [] when
    turned off or `bind` names no fixed cores. A thread that exits meanwhile is skipped."""
    if os.environ.get("RECACHE_TESTBED_PIN_ENGINE_CORE", "1") == "0":
        return []
    cpus = parse_cpus(bind or "")
    if not cpus:
        return []
    pinned = []
    for pid in children(server_pid):
        if not comm(pid).startswith("VLLM::EngineCor"):
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:  # the thread ended, or a core left the machine's set
                pass
        pinned.append(pid)
    return pinned
