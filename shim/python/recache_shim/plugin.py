"""vLLM general-plugin entry point (``vllm.general_plugins`` -> ``register``).

vLLM calls ``register()`` in every process, including the API server before it
starts workers, so this must not initialise CUDA (a driver initialised before
a fork breaks the workers). It only checks that the shim library loads and
logs the outcome; kernels are probed lazily by :func:`kernels_available` in
the worker that uses them. If anything is missing the engine runs unchanged.
It also installs the eviction steering of :mod:`recache_shim.eviction` when
``RECACHE_SHIM_ORDER`` names recache's order file.
"""

import logging

from . import _lib

logger = logging.getLogger("recache_shim")


def register() -> None:
    try:
        lib, err = _lib.load()
        if lib is None:
            logger.info("recache kernels disabled: %s", err)
        else:
            logger.info("recache shim loaded (C ABI %d); kernels probed on first use",
                        lib.recache_shim_abi_version())
    except Exception as e:  # never break engine start-up
        logger.warning("recache plugin registration failed, engine unchanged: %s", e)
    try:
        # Eviction steering (RECACHE_SHIM_ORDER): a class patch, no CUDA, no I/O beyond
        # opening a reader handle; off unless configured and the vLLM version is the tested one.
        from . import eviction
        eviction.install()
    except Exception as e:
        logger.warning("recache eviction steering not installed, vLLM evicts natively: %s", e)
