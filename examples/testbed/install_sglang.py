#!/usr/bin/env python3
"""Owns the SGLang CPU install: a cached venv with PyPI `sglang` and a matching torch.

Run with the *system* Python (stdlib + pip only); it builds the venv itself.
Recipe (see shared notes on engines): fresh venv -> `uv` from PyPI (it resolves sglang's
large dependency set in seconds where pip backtracks for minutes) -> `torch==X` (PyPI CUDA
build, runs on CPU) -> `sglang==Y` with the same torch pin -> uninstall `sglang-kernel` /
`sgl-kernel` (every wheel on PyPI is a GPU build that fails to import without libcuda; the
testbed's CPU ops come from `examples/testbed/sgl_kernel_stub`, put on PYTHONPATH by
`launch.py` only) -> `import sglang` check -> stamp.

A stamp file holding the recipe is written only after the import check, so an interrupted
or outdated install is redone. A venv without the stamp is not thrown away first: running
the recipe over it is idempotent and, when everything is already there, takes seconds
(`uv pip install` on a satisfied venv), so a pre-installed venv is adopted cheaply.
Progress: one line per step on stderr; installer output goes to the install log.
"""
import argparse, os, sys, time

# The vLLM installer beside this file owns the step/log helpers both installers use.
from install import run, step

SGLANG_VERSION = "0.5.23"
TORCH_VERSION = "2.14.1"
RECIPE = f"sglang=={SGLANG_VERSION} torch=={TORCH_VERSION} no-sglang-kernel uv recipe=1"


def install(home):
    venv = os.path.join(home, "venv-sglang")
    stamp = os.path.join(venv, ".recache-testbed-stamp")
    if os.path.exists(stamp) and open(stamp).read().strip() == RECIPE:
        step(f"SGLang venv ready (cached): {venv}")
        return venv
    t0 = time.time()
    os.makedirs(home, exist_ok=True)
    log = os.path.join(home, "install-sglang.log")
    open(log, "w").close()
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(stamp):  # another recipe: start over rather than mix versions
        step(f"removing outdated venv {venv}")
        import shutil
        shutil.rmtree(venv)
    if not os.path.exists(py):
        try:
            import ensurepip  # noqa: F401  (Debian splits it out of the base python package)
        except ImportError:
            sys.exit(f"[testbed] {sys.executable} cannot create venvs with pip: "
                     "install python3-venv (Debian: apt-get install python3-venv)")
        step(f"creating venv {venv} (log: {log})")
        run([sys.executable, "-m", "venv", venv], log)
    else:
        step(f"completing unstamped venv {venv} (log: {log})")
    run([py, "-m", "pip", "--no-input", "--disable-pip-version-check", "install", "-q", "uv"],
        log)
    uv = [os.path.join(venv, "bin", "uv"), "pip"]
    step(f"uv pip install torch=={TORCH_VERSION} (large download; 1-3 min)")
    run(uv + ["install", "--python", py, f"torch=={TORCH_VERSION}"], log)
    step(f"uv pip install sglang=={SGLANG_VERSION} (torch held at {TORCH_VERSION})")
    run(uv + ["install", "--python", py, f"sglang=={SGLANG_VERSION}", f"torch=={TORCH_VERSION}"],
        log)
    step("uv pip uninstall sglang-kernel sgl-kernel (GPU-only wheels)")
    run(uv + ["uninstall", "--python", py, "sglang-kernel", "sgl-kernel"], log)
    step("checking `import sglang` (without any sgl_kernel)")
    run([py, "-c", "import importlib.util as u, sglang, torch; "
         "assert u.find_spec('sgl_kernel') is None, 'a GPU sgl_kernel is still installed'; "
         "print('sglang', sglang.__version__, 'torch', torch.__version__)"], log)
    with open(stamp, "w") as f:
        f.write(RECIPE + "\n")
    step(f"SGLang venv installed in {time.time() - t0:.0f}s")
    return venv


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", required=True, help="testbed cache directory")
    venv = install(ap.parse_args().home)
    print(venv)
