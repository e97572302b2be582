"""The stages after the Forward filter on the GPU (kernels/tail/tail.cu): `stages.tail.schedule.run`
with a device of CuPy arrays on the calling thread's stream. CuPy comes from the engine
(`GpuEngine.xp`): engine/gpu.py stays the one module that imports it."""

from __future__ import annotations

import time

import numpy as np

from ..stages.tail import launch, schedule


def run(engine, batch, timing=None, longest=None):
    """`schedule.run`'s outputs for the `launch.TailBatch` `batch` on `engine` (a GpuEngine), in
    arenas of at most the engine's share of its memory. `timing`, a dict, gains each stage's
    kernel seconds; `longest`, a dict, keeps each stage's longest item in seconds."""
    device = TailDevice(engine, clocked=longest is not None)
    budget = min(launch.ARENA_BUDGET, engine.memory_bytes // (launch.CALLS_AT_ONCE + 1))
    outputs = schedule.run(batch, device, budget)
    if timing is not None:
        device.add_times(timing)
    if longest is not None:
        device.keep_longest(longest)
    return outputs


class TailDevice:
    """`schedule.run`'s device on the GPU: CuPy arrays on the caller's stream, one launch per stage
    call, `launch.THREADS_PER_ITEM` threads per item. Transfers go through pinned memory,
    asynchronous on the stream, so that a read waits for this stream alone and other threads'
    copies and kernels run on meanwhile."""

    KERNELS = tuple(
        f"gpuhmm::tail_{s}"
        for s in (
            "parse",
            "regions",
            "envelopes",
            "assemble",
            "serialize",
            "traces",
            "clusters",
            "parse_wide",
            "envelopes_wide",
        )
    )
    THREADS = 64  # tail.cu's TAIL_THREADS, for which its launch bounds cap registers

    def __init__(self, engine, clocked=False):
        self.engine, self.xp, self.events, self.kept = engine, engine.xp, [], []
        self.side, self.beside = None, []  # the stream of kernels launched beside, and their ends
        self.waited = 0.0  # seconds the host waited for the stream in `fetch`
        # Clocked: each kernel's longest item in ns, by stage (tail.cu's item clocks).
        self.item_clocks = self.xp.zeros(8 * len(self.KERNELS), np.uint8) if clocked else None

    def put(self, array):
        array = np.ascontiguousarray(array)
        staged = self._pinned(array.shape, array.dtype)
        staged[...] = array
        out = self.xp.empty(array.shape, array.dtype)
        if array.nbytes:
            out.data.copy_from_host_async(staged.ctypes.data, array.nbytes, self.xp.cuda.get_current_stream())
        self.kept.append(staged)  # pinned until the stream has passed the copy: the run ends with a read
        return out

    def fetch(self, arrays):
        """Device arrays to pinned host arrays, after one wait for this stream."""
        stream, hosts = self.xp.cuda.get_current_stream(), []
        for array in arrays:
            array = self.xp.ascontiguousarray(array)
            hosts.append(self._pinned(array.shape, array.dtype))
            if array.nbytes:
                array.data.copy_to_host_async(hosts[-1].ctypes.data, array.nbytes, stream)
        started = time.perf_counter()
        stream.synchronize()
        self.waited += time.perf_counter() - started
        return hosts

    def resident(self, array):
        return self.engine.resident(array)

    def empty(self, nbytes):
        return self.xp.empty(nbytes, dtype=np.uint8)

    @staticmethod
    def address(array):
        return array.data.ptr

    def launch(self, stage, count, struct, beside=False):
        """Stage `stage`'s kernel over `count` items on the stream; `beside`, on a stream of its
        own from here on, until `join`."""
        cuda = self.xp.cuda
        kernel = self.engine._compiled("tail/tail.cu", self.KERNELS[stage], exact=True)
        pointer = self.put(np.frombuffer(struct, dtype=np.uint8))
        spread, group = launch.THREADS_PER_ITEM[stage], launch.SAME_MODEL_ITEMS[stage]
        stream = cuda.get_current_stream()
        if beside:
            forked = cuda.Event()
            forked.record(stream)
            self.side = stream = self.side or cuda.Stream(non_blocking=True)
            stream.wait_event(forked)
        started, stopped = cuda.Event(), cuda.Event()
        with stream:
            started.record()
            kernel((-(-count * spread // self.THREADS),), (self.THREADS,), (pointer, np.int32(spread), np.int32(group)))
            stopped.record()
        self.kept.append(pointer)
        self.events.append((stage, started, stopped))
        if beside:
            self.beside.append(stopped)

    def join(self):
        """Makes the stream wait for the kernels launched beside it."""
        main = self.xp.cuda.get_current_stream()
        for event in self.beside:
            main.wait_event(event)
        self.beside.clear()

    def add_times(self, timing):
        """Adds each stage's kernel seconds, and the host's wait for them (`wait`), to the dict `timing`."""
        timing["wait"] = timing.get("wait", 0.0) + self.waited
        for stage, started, stopped in self.events:
            stopped.synchronize()
            name = self.KERNELS[stage].split("tail_")[-1]
            timing[name] = timing.get(name, 0.0) + self.xp.cuda.get_elapsed_time(started, stopped) / 1e3

    def keep_longest(self, longest):
        """Keeps in the dict `longest` each stage's longest item in seconds, this run's or its own."""
        for stage, ns in enumerate(self.item_clocks.view(np.uint64).get()):
            name = self.KERNELS[stage].split("tail_")[-1]
            longest[name] = max(longest.get(name, 0.0), int(ns) / 1e9)

    def _pinned(self, shape, dtype):
        """A host array in page-locked memory from CuPy's pool, which it holds while it lives."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if not count:
            return np.empty(shape, dtype)
        memory = self.xp.cuda.alloc_pinned_memory(count * dtype.itemsize)
        return np.frombuffer(memory, dtype, count).reshape(shape)
