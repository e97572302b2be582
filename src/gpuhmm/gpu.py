"""The GPU engine: the one module that imports CuPy. Compiles, caches and launches the kernels.

Kernels are CUDA C++ templates in `kernels/`, specialized at run time through NVRTC
(`RawModule(name_expressions=...)`): sequences per warp S, words per thread H, the stage,
the lane arithmetic and the table cell width. CuPy caches each compiled module on disk
(under `$CUPY_CACHE_DIR`, by default ~/.cache/gpuhmm/kernels), keyed by the full source, so a
change to a header recompiles. Warp blocks stay resident on the device for as long as the
host object that describes them lives.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("CUPY_CACHE_DIR", str(Path.home() / ".cache" / "gpuhmm" / "kernels"))

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from .warpblocks import model_tables  # noqa: E402

KERNELS = Path(__file__).parent / "kernels"
LANES = {"dpx16": "gpuhmm::Lanes16", "simd8": "gpuhmm::Lanes8"}
STAGES = {"ssv": 0, "msv": 1}


def device_count():
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        return 0


def _source():
    """msv.cu with its headers inlined, so the disk cache key covers them."""
    text = (KERNELS / "msv.cu").read_text()
    return text.replace('#include "lanes.cuh"', (KERNELS / "lanes.cuh").read_text())


class GpuEngine:
    """Runs the SSV/MSV kernels on the current CUDA device."""

    def __init__(self, table_capability=None):
        device = cupy.cuda.Device()
        properties = cupy.cuda.runtime.getDeviceProperties(device.id)
        self.name = properties["name"].decode() if isinstance(properties["name"], bytes) else properties["name"]
        self.architecture = int(device.compute_capability)
        # Which tuning table (and so which lane arithmetic) to use; tests force the older path.
        self.compute_capability = table_capability or self.architecture
        self.multiprocessors = properties["multiProcessorCount"]
        self.shared_memory_limit = properties["sharedMemPerBlockOptin"]
        self._kernels = {}
        self._resident = {}

    def warps(self, warps_per_sm):
        return self.multiprocessors * warps_per_sm

    def kernel(self, choice):
        s = choice.striping
        expression = (
            f"gpuhmm::msv_stage<{s.S}, {s.H}, {STAGES[choice.stage]}, "
            f"{LANES[choice.arithmetic]}, {choice.cta_warps}>"
        )
        if expression not in self._kernels:
            module = cupy.RawModule(
                code=_source(),
                options=("-std=c++17", f"--gpu-architecture=sm_{self.architecture}"),
                name_expressions=[expression],
            )
            function = module.get_function(expression)
            if s.shared_bytes > 48 * 1024:
                function.max_dynamic_shared_size_bytes = s.shared_bytes
            self._kernels[expression] = function
        return self._kernels[expression]

    def _device_blocks(self, blocks):
        key = id(blocks)
        if key not in self._resident or self._resident[key][0] is not blocks:
            self._resident[key] = (blocks, {
                "data": cupy.asarray(blocks.data),
                "block_start": cupy.asarray(blocks.block_start.astype(np.int64)),
                "heights": cupy.asarray(blocks.heights.astype(np.int32)),
                "column_start": cupy.asarray(blocks.column_start.astype(np.int32)),
                "column_sequences": cupy.asarray(blocks.column_sequences.astype(np.int32)),
            })
        return self._resident[key][1]

    def _prepare(self, choice, blocks, models, tjb, sequences):
        s = choice.striping
        if s.shared_bytes > self.shared_memory_limit:
            raise ValueError(f"{choice}: table of {s.shared_bytes} bytes exceeds shared memory")
        tables, offsets = model_tables(models, s, choice.arithmetic)
        parameters = np.array([[m.bias, m.base, m.tbm, m.tec] for m in models], dtype=np.int32)
        device = self._device_blocks(blocks)
        out = cupy.zeros((len(models), sequences), dtype=np.uint8 if choice.stage == "ssv" else np.int16)
        tjb_device = cupy.asarray(tjb if tjb is not None else np.zeros(max(1, sequences), np.uint8))
        arguments = (
            device["data"], device["block_start"], device["heights"], device["column_start"],
            device["column_sequences"], np.int32(blocks.warps), cupy.asarray(tables),
            cupy.asarray(offsets), cupy.asarray(parameters), tjb_device, np.int32(sequences), out,
        )
        grid = (-(-blocks.warps // choice.cta_warps), len(models))
        kernel = self.kernel(choice)

        def call():
            kernel(grid, (choice.cta_warps * 32,), arguments, shared_mem=s.shared_bytes)

        return call, out

    def launch(self, choice, blocks, models, tjb, sequences):
        """One launch: every model (same specialization) × every warp block.

        Returns the host output, uint8 bests (SSV) or int16 xJ (MSV), (models, sequences).
        """
        call, out = self._prepare(choice, blocks, models, tjb, sequences)
        call()
        return cupy.asnumpy(out)

    def time_launch(self, choice, blocks, models, tjb, sequences, repeats=3):
        """Median kernel time in seconds over `repeats` launches, after one warm-up."""
        call, _ = self._prepare(choice, blocks, models, tjb, sequences)
        call()
        times = []
        for _ in range(repeats):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            call()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 1000.0)
        return float(np.median(times))

    def ssv(self, choice, blocks, models, sequences):
        return self.launch(choice, blocks, models, None, sequences)

    def msv(self, choice, blocks, models, tjb, sequences):
        return self.launch(choice, blocks, models, tjb, sequences)
