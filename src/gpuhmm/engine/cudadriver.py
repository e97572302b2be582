"""CUDA's driver library called through ctypes, for starting CUDA off the interpreter lock.

ctypes lets go of the lock for as long as a foreign call runs; CuPy's runtime calls keep it.
Starting CUDA takes about a second (its driver sets a GPU up for the first process to open it,
then the GPU's context), so a process that starts CUDA through CuPy stops its other threads
for that long. Both functions leave a missing or failing driver to CuPy's own calls, which
report it in full.
"""

from __future__ import annotations

import ctypes


def _initialized_driver():
    """The driver library with cuInit done (no context, no memory), or None."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return driver if driver.cuInit(0) == 0 else None


def open_driver():
    """Initialize the driver; whether it did. The driver stays initialized, and each GPU set
    up, while the process lives."""
    return _initialized_driver() is not None


#: CU_CTX_SCHED_BLOCKING_SYNC: a thread waiting for the GPU sleeps instead of spinning, so that
#: the threads waiting on kernels leave their cores to the host's share of the work.
_BLOCKING_SYNC = 0x04


def retain_primary_context():
    """Initialize the driver and retain the primary context of the first GPU it shows this
    process, the context CUDA's runtime (and so CuPy) works in, with blocking waits; whether it
    did. Retained, it stays while the process lives."""
    driver = _initialized_driver()
    if driver is None:
        return False
    device, context = ctypes.c_int(), ctypes.c_void_p()
    if driver.cuDeviceGet(ctypes.byref(device), 0) != 0:
        return False
    driver.cuDevicePrimaryCtxSetFlags(device, _BLOCKING_SYNC)  # refused once the context is active
    return driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
