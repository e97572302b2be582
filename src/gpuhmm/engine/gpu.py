"""The GPU engine: the one module that imports CuPy. Compiles, caches and launches the kernels.

Kernels are CUDA C++ templates in `kernels/`, specialized at run time through NVRTC
(`RawModule(name_expressions=...)`): sequences per warp S, words per thread H, the stage,
the lane arithmetic and the table cell width. Each specialization is compiled once per machine
and kept on disk (`kernelcache`, under `$CUPY_CACHE_DIR`, by default ~/.cache/gpuhmm/kernels),
keyed by the full source, so a change to a header recompiles. A shard's device data stays
resident for as long as the host object it was made from lives. The tail's stages run through
`taildevice`, which takes CuPy from `GpuEngine.xp`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time

from . import kernelcache  # before CuPy, which reads the cache folder as it is imported

os.environ.setdefault("CUPY_CACHE_DIR", kernelcache.cache_directory())

import cupy  # noqa: E402
import numpy as np  # noqa: E402

from ..stages import biasfilter, fwdfilter, msvfilter, vitlayout  # noqa: E402
from ..stages.msvlayout import model_tables  # noqa: E402
from ..stages.tail import launch as tail_launch  # noqa: E402
from . import cudadriver, taildevice, tuning  # noqa: E402
from .resident import ResidentCache  # noqa: E402

log = logging.getLogger("gpuhmm")
LANES = {"dpx16": "gpuhmm::Lanes16", "simd8": "gpuhmm::Lanes8", "vit16": "gpuhmm::Vit16", "vit32": "gpuhmm::Vit32"}
STAGES = {"ssv": 0, "msv": 1}
BIAS_CTA_THREADS = 128
F1_THREADS = 256
LAYOUT_THREADS = 128


#: What CuPy's RawModule adds to the options it is given before it calls NVRTC; `_nvrtc` calls
#: NVRTC through CuPy's compiler directly, so it adds them itself, for identical binaries.
_CUPY_ADDED_OPTIONS = ("-ftz=true",)
#: The tail's kernels reproduce HMMER's float arithmetic: no flush-to-zero, no contraction.
_EXACT_OPTIONS = ("-ftz=false", "-fmad=false")


def _nvrtc(code, expression, options):
    """(binary, lowered name) of one specialization, as CuPy's RawModule would compile it."""
    from cupy.cuda import compiler

    binary, lowered = compiler.compile_using_nvrtc(code, options, name_expressions=[expression])
    name = lowered[expression]
    return binary, name.decode() if isinstance(name, bytes) else name


def _load_binary(path, lowered):
    return cupy.RawModule(path=str(path)).get_function(lowered)


def device_count():
    """The GPUs CUDA shows this process. Asked first, it starts CUDA on the first of them
    through the driver (`cudadriver`), off the interpreter lock, so that CuPy's own start,
    which holds the lock, finds it done."""
    _start_cuda()
    try:
        return cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        return 0


@functools.cache
def _start_cuda():
    cudadriver.retain_primary_context()


class GpuEngine:
    """Runs the kernels (SSV and the F1 decision, pair-list MSV, bias, Viterbi, Forward, and the
    stages after the Forward filter) on the current CUDA device."""

    xp = cupy  # the array module of the engine's devices (`taildevice`)

    def __init__(self, table_capability=None):
        device = cupy.cuda.Device()
        properties = cupy.cuda.runtime.getDeviceProperties(device.id)
        self.name = properties["name"].decode() if isinstance(properties["name"], bytes) else properties["name"]
        self.architecture = int(device.compute_capability)
        # Which tuning table (and so which lane arithmetic) to use; tests force the older path.
        self.compute_capability = table_capability or self.architecture
        self.multiprocessors = properties["multiProcessorCount"]
        self.shared_memory_limit = properties["sharedMemPerBlockOptin"]
        self.memory_bytes = properties["totalGlobalMem"]
        self._kernels = {}
        self._resident = ResidentCache()
        # Worker threads share the engine. Each thread issues its calls on a stream of its own,
        # so one thread's transfers, waits and host work overlap the others' kernels; the
        # locks guard only the shared caches (compiled kernels, resident arrays).
        self._compile_lock = threading.Lock()
        self._kernel_locks = {}
        self._cache_failures = 0
        self._thread = threading.local()
        self._tail_slots = threading.BoundedSemaphore(tail_launch.CALLS_AT_ONCE)
        self.first_launch = None  # Unix seconds of its first filter launch (`f1_sieve`)

    @contextlib.contextmanager
    def _stream(self):
        """This thread's stream, current for the duration of one call."""
        stream = getattr(self._thread, "stream", None)
        if stream is None:
            stream = self._thread.stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            yield stream

    def warps(self, warps_per_sm):
        return self.multiprocessors * warps_per_sm

    def holds(self, M):
        """Whether the filter kernels take a model of M nodes: its SSV table fits in shared memory."""
        return tuning.choose(M, "ssv", self.compute_capability).striping.shared_bytes <= self.shared_memory_limit

    def kernel(self, choice):
        s = choice.striping
        if choice.stage == "viterbi":
            source, shared = "vit.cu", vitlayout.shared_bytes(s)
            expression = f"gpuhmm::viterbi_filter<{s.S}, {s.H}, {LANES[choice.arithmetic]}, {choice.cta_warps}>"
        else:
            source, shared = "msv.cu", s.shared_bytes
            expression = (
                f"gpuhmm::msv_stage<{s.S}, {s.H}, {STAGES[choice.stage]}, "
                f"{LANES[choice.arithmetic]}, {choice.cta_warps}>"
            )
        return self._compiled(source, expression, shared)

    def _msv_pairs_kernel(self, choice):
        H, cta_warps = choice
        return self._compiled("msvpairs.cu", f"gpuhmm::msv_pairs<{H}, {cta_warps}>")

    def _forward_kernel(self, choice):
        return self._compiled("fwd.cu", f"gpuhmm::forward_filter<{choice.cta_warps}>", choice.shared_bytes)

    def preload(self, lengths):
        """Load (from the disk cache, or compile) the kernels a search of models of these
        lengths runs, before its first tasks need them. Vit32, which runs only the pairs Vit16
        cannot vouch for, is left to load on first use."""
        cc = self.compute_capability
        # CuPy builds its own kernels (comparisons, nonzero, gather) on first use, under the
        # import lock: build them here rather than in every worker thread's first call at once.
        probe = cupy.zeros(64, dtype=np.uint8)
        cupy.asnumpy(cupy.zeros(64, dtype=np.float32)[cupy.flatnonzero(probe == 1)])
        for source, expression in (
            ("layout.cu", "gpuhmm::warp_block_layout"),
            ("f1.cu", f"gpuhmm::f1_decide<{F1_THREADS}>"),
            ("bias.cu", f"gpuhmm::bias_filter<{BIAS_CTA_THREADS}>"),
        ):
            self._compiled(source, expression)
        for M in sorted(set(lengths)):
            self.kernel(tuning.choose(M, "ssv", cc))
            for choice, load in (
                (tuning.choose_viterbi(M, "vit16", cc), self.kernel),
                (tuning.choose_msv_pairs(M, cc), self._msv_pairs_kernel),
                (tuning.choose_forward(M, cc), self._forward_kernel),
            ):
                if choice is not None:
                    load(choice)

    def _compiled(self, source, expression, shared=0, exact=False):
        """One specialization of a kernel template, loaded once per process (and compiled once
        per machine, `kernelcache`). Threads loading different specializations do not wait for
        each other. `exact` kernels are built with `_EXACT_OPTIONS` and only through `_nvrtc`."""
        with self._compile_lock:
            lock = self._kernel_locks.setdefault(expression, threading.Lock())
        with lock:
            if expression not in self._kernels:
                self._kernels[expression] = self._load(kernelcache.kernel_source(source), expression, exact)
            function = self._kernels[expression]
            if shared > 48 * 1024 and function.max_dynamic_shared_size_bytes < shared:
                function.max_dynamic_shared_size_bytes = shared
            return function

    def _load(self, code, expression, exact=False):
        options = ("-std=c++17", f"--gpu-architecture=sm_{self.architecture}")
        try:
            return kernelcache.cached_kernel(
                os.environ["CUPY_CACHE_DIR"],
                code,
                expression,
                options + (_EXACT_OPTIONS if exact else _CUPY_ADDED_OPTIONS),
                (cupy.__version__, cupy.cuda.nvrtc.getVersion()),
                _nvrtc,
                _load_binary,
            )
        except Exception as error:  # CuPy's compile below raises a kernel's own errors in full
            if exact:  # RawModule would add -ftz=true
                raise
            report = log.debug if self._cache_failures else log.warning
            self._cache_failures += 1
            report(
                "kernel disk cache unusable for %s (%s: %s); compiling in this process",
                expression,
                type(error).__name__,
                error,
            )
        module = cupy.RawModule(code=code, options=options, name_expressions=[expression])
        return module.get_function(expression)

    def _device_blocks(self, blocks):
        """The warp blocks on the device, laid out there (layout.cu) from the resident residues."""

        def lay_out():
            residues, offsets = blocks.source
            members = blocks.column_sequences.astype(np.int64)
            block_start = cupy.asarray(blocks.block_start)
            data = cupy.full(blocks.size, msvfilter.PAD_CODE, dtype=np.uint8)
            if len(members):
                self._compiled("layout.cu", "gpuhmm::warp_block_layout")(
                    (len(members),),
                    (LAYOUT_THREADS,),
                    (
                        self.resident(residues),
                        cupy.asarray(offsets[members]),
                        cupy.asarray((offsets[members + 1] - offsets[members]).astype(np.int32)),
                        cupy.asarray(blocks.sequence_column),
                        cupy.asarray(blocks.sequence_row),
                        block_start,
                        np.int32(blocks.S),
                        data,
                    ),
                )
            return {
                "data": data,
                "block_start": block_start,
                "heights": cupy.asarray(blocks.heights),
                "column_start": cupy.asarray(blocks.column_start),
                "column_sequences": cupy.asarray(blocks.column_sequences),
            }

        return self._kept_resident(blocks, "warp blocks", lay_out)

    def _kept_resident(self, owner, what, make):
        """Device data made from `owner` by make(), made once and kept while `owner` lives
        (`resident.ResidentCache`), synchronized before other threads' streams use it."""

        def made():
            value = make()
            cupy.cuda.get_current_stream().synchronize()
            return value

        return self._resident.get(owner, what, made)

    def _tables(self, choice, models):
        """Host side of a warp-block launch: the models' striped tables and scalars."""
        s = choice.striping
        if s.shared_bytes > self.shared_memory_limit:
            raise ValueError(f"{choice}: table of {s.shared_bytes} bytes exceeds shared memory")
        return model_tables(models, s, choice.arithmetic)

    def _prepare(self, choice, blocks, tables, tjb, sequences):
        s = choice.striping
        tables, offsets, parameters = tables
        device = self._device_blocks(blocks)
        out = cupy.zeros((len(parameters), sequences), dtype=np.uint8 if choice.stage == "ssv" else np.int16)
        tjb_device = cupy.asarray(tjb if tjb is not None else np.zeros(max(1, sequences), np.uint8))
        arguments = (
            device["data"],
            device["block_start"],
            device["heights"],
            device["column_start"],
            device["column_sequences"],
            np.int32(blocks.warps),
            cupy.asarray(tables),
            cupy.asarray(offsets),
            cupy.asarray(parameters),
            tjb_device,
            np.int32(sequences),
            out,
        )
        grid = (-(-blocks.warps // choice.cta_warps), len(parameters))
        kernel = self.kernel(choice)

        def call():
            kernel(grid, (choice.cta_warps * 32,), arguments, shared_mem=s.shared_bytes)

        return call, out

    def msv(self, choice, blocks, models, tjb, sequences):
        """One launch of `choice`'s stage: every model (same specialization) × every warp block.
        Returns uint8 bests (SSV, `tjb` None) or int16 xJ (MSV), (models, sequences), on the host."""
        tables = self._tables(choice, models)
        with self._stream():
            call, out = self._prepare(choice, blocks, tables, tjb, sequences)
            call()
            return cupy.asnumpy(out)

    def ssv(self, choice, blocks, models, sequences):
        return self.msv(choice, blocks, models, None, sequences)

    def f1_sieve(self, groups, shard):
        """SSV over the warp blocks, then the F1 decision beside its output (f1.cu), for `groups`
        of (choice, blocks, models, thresholds): flat indices (model · sequences + sequence, the
        models numbered across the groups in order) of the passing pairs, their MSV scores, and
        flat indices of the pairs SSV left undecided. Only those cross back, in one transfer."""
        host = [
            (choice, blocks, self._tables(choice, models), msvfilter.f1_parameters(models, thresholds))
            for choice, blocks, models, thresholds in groups
        ]
        sequences = shard.sequences
        rows = sum(len(parameters) for *_, parameters in host)
        with self._stream():
            if self.first_launch is None:
                self.first_launch = time.time()
            outcome = cupy.empty((rows, sequences), dtype=np.uint8)
            scores = cupy.empty((rows, sequences), dtype=np.float32)
            terms = (self.resident(shard.tjb), self.resident(shard.null1), self.resident(shard.msv_sequences[2]))
            kernel = self._compiled("f1.cu", f"gpuhmm::f1_decide<{F1_THREADS}>")
            row = 0
            for choice, blocks, tables, parameters in host:
                call, best = self._prepare(choice, blocks, tables, None, sequences)
                call()
                end = row + len(parameters)
                kernel(
                    (-(-sequences // F1_THREADS), len(parameters)),
                    (F1_THREADS,),
                    (
                        best,
                        np.int32(sequences),
                        cupy.asarray(parameters.view(np.uint8)),
                        *terms,
                        outcome[row:end],
                        scores[row:end],
                    ),
                )
                row = end
            passed = cupy.flatnonzero(outcome == 1)
            undecided = cupy.flatnonzero(outcome == 2)
            return cupy.asnumpy(passed), cupy.asnumpy(scores.reshape(-1)[passed]), cupy.asnumpy(undecided)

    def msv_pairs(self, launches):
        """Pair-list MSV launches (msvpairs.cu), side by side as `viterbi`'s. Each launch is
        ((H, warps per CTA), models, (residues, starts, lengths, tjb) kept resident, engine.pairs.PairBatch).
        Returns the final xJ (or −1, MSV_OVERFLOW) per launch, in each batch's pair order."""
        host = [msvfilter.pair_parameters(models, H) for (H, _), models, _, _ in launches]
        with self._stream():
            prepared = []
            for ((H, cta_warps), _, sequences, batch), (gains, parameters) in zip(launches, host):
                x_j = cupy.zeros(len(batch.pair_sequence), dtype=np.int16)
                arguments = (
                    *self._pair_list(sequences, batch),
                    cupy.asarray(gains),
                    cupy.asarray(parameters.view(np.uint8)),
                    x_j,
                )
                kernel = self._msv_pairs_kernel((H, cta_warps))
                prepared.append(((kernel, len(batch.chunk_model), cta_warps, arguments, 0), x_j))
            self._side_by_side([launch for launch, _ in prepared], None)
            return [cupy.asnumpy(x_j) for _, x_j in prepared]

    def tail(self, batch, timing=None, longest=None):
        """The stages after the Forward filter for a `stages.tail.launch.TailBatch` (`taildevice.run`)."""
        with self._tail_slots, self._stream():
            return taildevice.run(self, batch, timing, longest)

    def resident(self, array):
        """A host array kept on the device for as long as the host array lives."""
        return self._kept_resident(array, "copy", lambda: cupy.asarray(array))

    def _pair_list(self, sequences, batch):
        """The arguments every pair-list kernel (pairs.cuh) starts with: the resident sequences,
        the batch's pairs and chunks, and a zeroed counter per chunk."""
        return (
            *(self.resident(a) for a in sequences),
            cupy.asarray(batch.pair_sequence),
            cupy.asarray(batch.chunk_model),
            cupy.asarray(batch.chunk_start),
            cupy.asarray(batch.chunk_end),
            cupy.zeros(len(batch.chunk_model), dtype=np.int32),
        )

    def viterbi(self, launches, timing=None):
        """Viterbi-filter launches, side by side (`_side_by_side`). Each is (choice, profiles,
        sequences, batch): an engine.pairs.PairBatch over `profiles` of `choice`'s specialization, and
        `sequences` = (residues, starts, lengths, moves), kept resident. Returns (xC int32, status
        uint8) per launch in each batch's pair order; `timing` as `_side_by_side`'s."""
        host = [
            (choice, sequences, batch, *vitlayout.launch_parameters(profiles, choice.arithmetic, choice.striping))
            for choice, profiles, sequences, batch in launches
        ]
        with self._stream():
            prepared = []
            for choice, sequences, batch, blobs, offsets, parameters in host:
                pairs = len(batch.pair_sequence)
                outputs = (cupy.zeros(pairs, dtype=np.int32), cupy.zeros(pairs, dtype=np.uint8))
                arguments = (
                    *self._pair_list(sequences, batch),
                    cupy.asarray(blobs),
                    cupy.asarray(offsets),
                    cupy.asarray(parameters),
                    *outputs,
                )
                prepared.append((self.kernel(choice), choice, batch, arguments, outputs))
            self._side_by_side(
                [
                    (
                        kernel,
                        len(batch.chunk_model),
                        choice.cta_warps,
                        arguments,
                        vitlayout.shared_bytes(choice.striping),
                    )
                    for kernel, choice, batch, arguments, _ in prepared
                ],
                timing,
            )
            return [(cupy.asnumpy(xc), cupy.asnumpy(status)) for *_, (xc, status) in prepared]

    def forward(self, launches, timing=None):
        """Forward-filter launches (fwd.cu), side by side as `viterbi`'s. Each launch is
        (choice, profiles, sequences, batch): a tuning.ForwardChoice, fwdfilter.ForwardProfile,
        (residues, starts, lengths, moves) kept resident, and an engine.pairs.PairBatch. Returns the
        float64 scores (nats) per launch, in each batch's pair order."""
        host = [
            (choice, sequences, batch, *fwdfilter.launch_parameters(profiles))
            for choice, profiles, sequences, batch in launches
        ]
        with self._stream():
            prepared = []
            for choice, sequences, batch, blob, parameters in host:
                scores = cupy.zeros(len(batch.pair_sequence), dtype=np.float64)
                arguments = (
                    *self._pair_list(sequences, batch),
                    cupy.asarray(blob),
                    cupy.asarray(parameters.view(np.uint8)),
                    scores,
                )
                kernel = self._forward_kernel(choice)
                prepared.append(
                    ((kernel, len(batch.chunk_model), choice.cta_warps, arguments, choice.shared_bytes), scores)
                )
            self._side_by_side([launch for launch, _ in prepared], timing)
            return [cupy.asnumpy(scores) for _, scores in prepared]

    def bias(self, profiles, background_frequencies, sequences, pair_model, pair_sequence):
        """`p7_bg_FilterScore` per (model, sequence) pair: (scores float32, uncertain bool), the
        uncertain ones to be rescored on the host (engine.filters.resolve_uncertain).
        `sequences` is (residues, offsets), kept resident."""
        with self._stream():
            pairs = len(pair_model)
            if not pairs:
                return np.zeros(0, np.float32), np.zeros(0, bool)
            residues, offsets = sequences
            terms = self._bias_terms(offsets)
            odds, leave1, stay1 = biasfilter.model_terms(profiles, background_frequencies)
            scores = cupy.zeros(pairs, dtype=np.float32)
            uncertain = cupy.zeros(pairs, dtype=np.uint8)
            kernel = self._compiled("bias.cu", f"gpuhmm::bias_filter<{BIAS_CTA_THREADS}>")
            kernel(
                (-(-pairs // BIAS_CTA_THREADS),),
                (BIAS_CTA_THREADS,),
                (
                    self.resident(residues),
                    self.resident(offsets),
                    cupy.asarray(pair_model.astype(np.int32)),
                    cupy.asarray(pair_sequence.astype(np.int32)),
                    np.int32(pairs),
                    cupy.asarray(odds),
                    cupy.asarray(leave1),
                    cupy.asarray(stay1),
                    *terms,
                    scores,
                    uncertain,
                ),
            )
            return cupy.asnumpy(scores), cupy.asnumpy(uncertain).astype(bool)

    def _bias_terms(self, offsets):
        """The bias filter's per-length terms of a resident shard, on the device."""
        return self._kept_resident(
            offsets, "bias terms", lambda: [cupy.asarray(t) for t in biasfilter.length_terms(np.diff(offsets))]
        )

    def _side_by_side(self, launches, timing):
        """Chunked pair-list launches (kernel, chunks, warps per CTA, arguments, shared bytes), each
        on a stream of its own, so one launch's last long sequences overlap the others' work; with
        `timing` (a list), appends the device seconds from the first start to the last finish."""
        streams = self._thread.__dict__.setdefault("side_streams", [])
        while len(streams) < len(launches):
            streams.append(cupy.cuda.Stream(non_blocking=True))
        ready = cupy.cuda.get_current_stream().record()  # the arguments are on the device
        finished = []
        for stream, (kernel, chunks, cta_warps, arguments, shared) in zip(streams, launches):
            if chunks:
                stream.wait_event(ready)
                with stream:
                    kernel((chunks,), (cta_warps * 32,), arguments, shared_mem=shared)
                finished.append(stream.record())
        for event in finished:
            event.synchronize()
        if timing is not None and finished:
            timing.append(max(cupy.cuda.get_elapsed_time(ready, event) for event in finished) / 1000.0)
