"""What the shim's Python tests share: waiting for an event with a deadline, and running a
file's ``test_*`` functions in order when it is run as a script."""

import threading
import time


def wait_for(cond, what: str, timeout: float = 5.0) -> None:
    """Polls ``cond`` until it holds; fails with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        tick.wait(0.01)


def run_all(namespace: dict) -> None:
    """Runs every ``test_*`` function of ``namespace`` (a module's ``globals()``) by name."""
    tests = [v for k, v in sorted(namespace.items()) if k.startswith("test_")]
    for t in tests:
        t()
        print(f"ok {t.__name__}")
    print(f"{len(tests)} passed")
