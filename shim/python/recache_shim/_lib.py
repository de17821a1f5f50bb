"""Locate and load ``librecache_shim.so`` with ctypes and declare its C ABI.

Search order: ``$RECACHE_SHIM_LIB``, then a copy packaged next to this module.
Loading the library does not initialise CUDA (cudarc loads libcuda lazily).
"""

import ctypes
import os
from pathlib import Path
from typing import Optional, Tuple

ABI_VERSION = 2
LIB_ENV = "RECACHE_SHIM_LIB"
NVRTC_ENV = "RECACHE_NVRTC_PATH"

STATUS_NAMES = {
    0: "OK",
    1: "INVALID_ARGUMENT",
    2: "CUDA_UNAVAILABLE",
    3: "COMPILE_FAILED",
    4: "DRIVER_ERROR",
    5: "PANIC",
}

_c = ctypes
_i32, _i64, _u32, _f32, _sz, _vp = _c.c_int32, _c.c_int64, _c.c_uint32, _c.c_float, _c.c_size_t, _c.c_void_p
_pu64 = _c.POINTER(_c.c_uint64)

_SIGNATURES = {
    "recache_shim_abi_version": (_u32, []),
    "recache_shim_last_error": (_sz, [_c.c_char_p, _sz]),
    "recache_shim_kernels_available": (_i32, [_i32]),
    "recache_beam_topk_workspace_bytes": (_sz, [_i32, _i32]),
    "recache_item_kv_scatter": (_i32, [
        _i32, _vp, _i32, _i32, _pu64, _pu64, _pu64, _pu64,
        _i32, _i32, _i64, _i64, _i32, _i64, _i64, _i64,
        _i32, _vp, _vp, _vp, _vp, _vp, _i64, _i32, _i32, _f32, _i32,
    ]),
    # The CPU reference behind the same arguments, on host memory (no device, no stream).
    "recache_item_kv_scatter_host": (_i32, [
        _i32, _i32, _pu64, _pu64, _pu64, _pu64,
        _i32, _i32, _i64, _i64, _i32, _i64, _i64, _i64,
        _i32, _vp, _vp, _vp, _vp, _vp, _i64, _i32, _i32, _f32, _i32,
    ]),
    "recache_beam_topk": (_i32, [
        _i32, _vp, _vp, _i32, _i32, _i64, _vp, _vp, _vp, _vp, _vp, _i32, _i32,
        _vp, _sz, _vp, _vp, _vp, _vp, _vp,
    ]),
}

# Eviction-order reader (order_reader.py); optional so a library built before it still loads
# for the kernels (eviction steering then reports the library as unavailable).
_OPTIONAL_SIGNATURES = {
    "recache_order_open": (_vp, [_c.c_char_p]),
    "recache_order_close": (None, [_vp]),
    "recache_order_refresh": (_i32, [_vp, _c.c_uint64, _c.POINTER(_i32), _pu64, _pu64]),
    "recache_order_ranks": (_i32, [_vp, _pu64, _sz, _pu64]),
    "recache_order_hashes": (_i32, [_vp, _pu64, _sz, _pu64, _pu64]),
}

_lib: Optional[ctypes.CDLL] = None
_load_error: Optional[str] = None


def _candidates():
    env = os.environ.get(LIB_ENV)
    if env:
        yield Path(env)
    yield Path(__file__).with_name("librecache_shim.so")


def _point_at_wheel_nvrtc() -> None:
    """If torch's ``nvidia-cuda-nvrtc-cu12`` wheel is installed, let the shim
    use its libnvrtc for first-use compilation (unless the user chose one)."""
    if os.environ.get(NVRTC_ENV):
        return
    try:
        import nvidia.cuda_nvrtc as m  # type: ignore[import-not-found]
    except ImportError:
        return
    for base in getattr(m, "__path__", []):
        p = Path(base) / "lib" / "libnvrtc.so.12"
        if p.exists():
            os.environ[NVRTC_ENV] = str(p)
            return


def load() -> Tuple[Optional[ctypes.CDLL], Optional[str]]:
    """Return ``(lib, None)`` or ``(None, reason)``; cached after the first call."""
    global _lib, _load_error
    if _lib is not None or _load_error is not None:
        return _lib, _load_error
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if not path.exists():
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            _load_error = f"cannot load {path}: {e}"
            return None, _load_error
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        for name, (res, args) in _OPTIONAL_SIGNATURES.items():
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = res, args
        version = lib.recache_shim_abi_version()
        if version != ABI_VERSION:
            _load_error = f"{path} implements C ABI {version}, this module expects {ABI_VERSION}"
            return None, _load_error
        _point_at_wheel_nvrtc()
        _lib = lib
        return _lib, None
    _load_error = f"librecache_shim.so not found (set {LIB_ENV}); tried {tried}"
    return None, _load_error


def last_error(lib: ctypes.CDLL) -> str:
    n = lib.recache_shim_last_error(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.recache_shim_last_error(buf, n + 1)
    return buf.value.decode("utf-8", "replace")


def check(lib: ctypes.CDLL, status: int, what: str) -> None:
    if status != 0:
        name = STATUS_NAMES.get(status, str(status))
        raise RuntimeError(f"recache {what} failed ({name}): {last_error(lib)}")
