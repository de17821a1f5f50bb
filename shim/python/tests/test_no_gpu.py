"""Python side of the shim without a GPU (run by shim/tests/python_plugin.rs,
or directly: RECACHE_SHIM_LIB=target/debug/librecache_shim.so
PYTHONPATH=shim/python python3 shim/python/tests/test_no_gpu.py).

Checks: importing works without torch or CUDA; the real cdylib loads through
ctypes; kernels_available() is False with a reason and never raises;
register() is harmless; C ABI errors surface as messages.
"""

import ctypes
import os
import sys


def main() -> int:
    import recache_shim
    from recache_shim import _lib

    lib, err = _lib.load()
    assert lib is not None, f"shim library must load here: {err}"
    assert lib.recache_shim_abi_version() == _lib.ABI_VERSION

    recache_shim.register()

    available = recache_shim.kernels_available()
    reason = recache_shim.unavailable_reason()
    if os.environ.get("RECACHE_EXPECT_NO_GPU") == "1":
        assert available is False, "no GPU here, kernels must report unavailable"
        assert reason and "CUDA unavailable" in reason, reason
    print(f"kernels_available() = {available}; reason: {reason}")
    if os.environ.get("RECACHE_EXPECT_NO_GPU") == "1":
        # The device benchmark must degrade to a JSON "skipped" line, rc 2.
        from recache_shim import bench

        assert bench.main([]) == 2

    # Invalid dtype: rejected with a message, through the real C ABI.
    one = (ctypes.c_uint64 * 1)(16)
    st = lib.recache_item_kv_scatter(0, None, 9, 1, one, one, one, one, 2, 128, 1, 1, 16, 4096, 256, 128,
                                     1, None, None, None, None, None, 0, 0, 128, 1e6, 0)
    assert st == 1, st
    assert "dtype" in _lib.last_error(lib)
    try:
        _lib.check(lib, st, "probe")
    except RuntimeError as e:
        assert "INVALID_ARGUMENT" in str(e)
    else:
        raise AssertionError("check() must raise on a failure status")

    # Missing library: a reason, not an exception.
    _lib._lib = None
    _lib._load_error = None
    _lib._candidates = lambda: iter([_lib.Path("/nonexistent/librecache_shim.so")])
    lib2, err2 = _lib.load()
    assert lib2 is None and "not found" in err2, err2
    assert recache_shim.kernels_available(7) is False
    print("python plugin test: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
