"""A search in this process, without Dask: a pool of threads, and the GPU warmed as it starts.

A search with no `--scheduler` and at most one local GPU runs its tasks on `LocalExecutor`, a
pool of `--cpu` threads in this process (pyhmmer and the GPU engine release the interpreter
lock), which shares the database shards held in memory. It starts at once: no Dask to import,
no cluster to start. Where the GPU backend may run, it starts the GPU in the background as it is
made (`start_gpu`), while the inputs are read. `Progress` is the progress lines every executor
logs; `process_started` serves the run summary.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time

log = logging.getLogger("gpuhmm")

#: When this module was imported (Unix seconds): the process's start where /proc does not say.
_IMPORTED = time.time()

#: How often a long search reports progress, at most.
PROGRESS_SECONDS = 10.0

#: What a task dropped after another failed gives.
_DROPPED = object()

#: The threads that start the GPU, by name.
CUDA_START_THREAD, WARM_UP_THREAD = "gpuhmm-cuda-start", "gpuhmm-gpu-warm-up"


class Progress:
    """A run's progress lines, each opening with `label` ("search", or jackhmmer's round): the
    first once its tasks are submitted, before any ends; then at most every PROGRESS_SECONDS,
    and when the last completes. `cells` weighs each task."""

    def __init__(self, cells, submitting, label="search"):
        self.tasks, self.total_cells = len(cells), sum(cells) or 1
        self.label = label
        self.done = self.done_cells = 0
        self.started = self.reported = time.perf_counter()
        log.info(
            "%s: 0/%d tasks of %.3g cells, submitted in %.1fs",
            label,
            self.tasks,
            sum(cells),
            self.started - submitting,
        )

    def completed(self, weight):
        self.done += 1
        self.done_cells += weight
        now = time.perf_counter()
        if self.done == self.tasks or now - self.reported >= PROGRESS_SECONDS:
            self.reported = now
            fraction = self.done_cells / self.total_cells
            eta = (now - self.started) * (1 - fraction) / fraction if fraction else float("nan")
            log.info(
                "%s: %d/%d tasks, %.0f%% of cells, %.1f GCUPS, elapsed %.0fs, ETA %.0fs",
                self.label,
                self.done,
                self.tasks,
                100 * fraction,
                self.done_cells / max(now - self.started, 1e-9) / 1e9,
                now - self.started,
                eta,
            )


class LocalExecutor:
    """Runs tasks on a pool of `workers` threads in this process and yields their results as they
    complete, reporting progress: `cluster.DaskExecutor`'s interface, for one worker (this
    process) with at most one GPU. Tasks run in the order given; a task's error is raised in the
    caller, and the tasks not yet started are dropped. With `warm_gpu`, the GPU starts in the
    background at once (`start_gpu`)."""

    scheduler = None
    in_process = True  # the worker is this process, and shares its memory

    def __init__(self, workers=1, gpus=0, warm_gpu=False):
        self.workers, self.gpus = workers, gpus
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="gpuhmm-task")
        self._closing = None
        self._closing_lock = threading.Lock()
        if warm_gpu:
            start_gpu()

    def describe(self):
        return f"in-process: 1 worker(s), {self.workers} thread(s)"

    def worker_count(self):
        return 1

    def prepare_workers(self, setup, *arguments):
        """Run setup(*arguments, threads=the pool's thread count) here, now."""
        setup(*arguments, threads=self.workers)

    def run(self, function, items, cells, shards, shared, label="search"):
        """Yield function(item, shared) for every item as it completes; items start in the order
        given (largest first: `cells` weighs each). One worker holds every shard, so `shards`
        places nothing. Once a task fails, or the caller stops, the tasks not yet started are
        dropped. `label` opens the progress lines."""
        progress = Progress(cells, time.perf_counter(), label)
        stopped = threading.Event()

        def task(item):
            if stopped.is_set():
                return _DROPPED
            try:
                return function(item, shared)
            except BaseException:
                stopped.set()
                raise

        futures = {self._pool.submit(task, item): weight for item, weight in zip(items, cells)}
        try:
            for future in concurrent.futures.as_completed(futures):
                result, weight = future.result(), futures.pop(future)  # kept no longer than the caller keeps it
                if result is not _DROPPED:  # the failed task's error is still to come
                    progress.completed(weight)
                    yield result
        finally:
            stopped.set()
            for future in futures:
                future.cancel()

    def close_in_background(self):
        """Start shutting the pool down, and return; `close()` then waits for it."""
        with self._closing_lock:
            if self._closing is None:
                self._closing = threading.Thread(
                    target=self._pool.shutdown, kwargs={"cancel_futures": True}, name="gpuhmm-pool-close", daemon=True
                )
                self._closing.start()

    def close(self):
        self.close_in_background()
        self._closing.join()

    def __enter__(self):
        return self

    def __exit__(self, failure, *exc):
        if failure is None:
            self.close()
        else:  # tasks still running finish on their own: the error need not wait for them
            self._pool.shutdown(wait=False, cancel_futures=True)
        return False


def start_gpu():
    """Start the GPU in the background, as far as a search's first kernel needs: CUDA's context
    (through the driver, off the interpreter lock), and meanwhile CuPy, the engine and the
    kernels every search runs (`GpuEngine.preload`); the kernels of the search's own models
    follow once they are read (`worker.prepare_worker`). Nothing where CuPy is not installed; a
    failure is left to the search, which reports it in full."""
    from . import engine

    if engine.cupy_problem() is not None:
        return
    threading.Thread(target=_start_cuda, name=CUDA_START_THREAD, daemon=True).start()
    threading.Thread(target=_warm_up, name=WARM_UP_THREAD, daemon=True).start()


def _start_cuda():
    from .engine import cudadriver

    cudadriver.retain_primary_context()


def _warm_up():
    from . import engine

    try:
        if engine.gpu_problem() is None:
            from .worker import STATE

            STATE.engine().preload(())
    except Exception as error:  # the search meets it again, and reports it
        log.debug("warming the GPU up failed: %s", error)


def process_started():
    """When this process started, in Unix seconds: Linux's record of it (/proc), or else when
    this module was imported."""
    try:
        with open("/proc/self/stat", "rb") as handle:
            # The fields after the command's name, which may hold spaces, from the third on.
            fields = handle.read().rsplit(b")", 1)[1].split()
        with open("/proc/uptime", "rb") as handle:
            uptime = float(handle.read().split()[0])
        return time.time() - uptime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return _IMPORTED


def first_kernel_seconds(engine, since):
    """Seconds from this process's start to `engine`'s first filter kernel, where it launched
    one at `since` (Unix seconds) or later; None otherwise (a CPU search, workers elsewhere, or
    an engine an earlier search of this process started)."""
    launched = getattr(engine, "first_launch", None)
    if launched is None or launched < since:
        return None
    return round(launched - process_started(), 3)
