"""What runs the stages: the GPU engine (`gpu`, the only module that imports CuPy), its numpy
reference (`reference`), kernel choices per GPU generation (`tuning`), the filter chain, and C
built for the host (`hostc`)."""

import importlib.util


def gpu_problem():
    """Why the GPU backend cannot run here, or None when it can."""
    try:
        from . import gpu
    except Exception as error:  # no CuPy, or a CuPy that cannot load CUDA
        return f"CuPy with a CUDA driver is needed ({type(error).__name__}: {error}); install gpuhmm[gpu]"
    if gpu.device_count() == 0:
        return "no CUDA GPU is visible to this process"
    return None


def cupy_problem():
    """Why CuPy cannot be imported, found without importing it; None when it is installed."""
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is needed for the GPU backend (no module named 'cupy'); install gpuhmm[gpu]"
    return None
