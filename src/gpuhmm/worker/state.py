"""A worker process's state: one object, shared by the worker's threads, kept between tasks."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading

import pyhmmer.plan7

from ..db.models import ModelsOnDisk
from ..engine import gpu_problem
from ..errors import GpuhmmError
from .models import ConfiguredModels
from .shards import ResidentShards, host_memory_bytes
from .tailqueue import TailQueue

log = logging.getLogger("gpuhmm")

#: At most this share of a worker's threads run SSV at once: the filters' one stage that fills
#: the GPU, and the one a task spends longest in. Unpaced, tasks that start together leave the
#: GPU together and run their host steps, Viterbi and tails together while it idles; paced, each
#: task leaves SSV as the next one enters, so one task's host work runs beside another's SSV.
SIEVE_SHARE = 0.25


class WorkerState:
    """Everything a worker keeps between tasks: its resident shards, its configured models, its
    GPU engine (one per process; each thread issues its calls on a stream of its own) and the
    engine's tail queue, each thread's pyhmmer pipelines, and the slots that pace SSV
    (`SIEVE_SHARE`)."""

    def __init__(self):
        self.shards = ResidentShards(self._default_shard_budget)
        self.models = ConfiguredModels()
        self.gpu_engine = None  # made on first use by `engine`
        self.gpu_tail = None  # the engine's tail queue, made on first use by `tail_queue`
        self.sieve_slots = None  # a semaphore of SIEVE_SHARE of the threads, once they are known
        self.threads = os.cpu_count() or 1  # the worker's threads, once they are known
        self.tasks_running = 0  # search tasks running now (`running_task`)
        self._engine_lock = threading.Lock()
        self._tasks_lock = threading.Lock()
        self._per_thread = threading.local()

    def engine(self):
        """The process's GPU engine, made on first use."""
        with self._engine_lock:
            if self.gpu_engine is None:
                problem = gpu_problem()
                if problem is not None:
                    raise GpuhmmError(f"--backend gpu on {worker_name()}", problem)
                from ..engine.gpu import GpuEngine

                self.gpu_engine = GpuEngine()
            return self.gpu_engine

    def tail_queue(self):
        """The GPU's tail queue (`tailqueue.TailQueue`), made on first use; its feeders run the
        engine's batches, and threads that help it use their own pipelines."""
        engine = self.engine()
        with self._engine_lock:
            if self.gpu_tail is None or self.gpu_tail.engine is not engine:
                self.gpu_tail = TailQueue(engine, self.pipeline, self.threads, running=lambda: self.tasks_running)
            return self.gpu_tail

    @contextlib.contextmanager
    def running_task(self):
        """Counts a search task as running while the block runs: the tail queue's helpers take
        the threads the running tasks leave idle."""
        with self._tasks_lock:
            self.tasks_running += 1
        try:
            yield
        finally:
            with self._tasks_lock:
                self.tasks_running -= 1

    def pipeline(self, alphabet, settings):
        """This thread's pyhmmer Pipeline for `settings` (messages.PipelineSettings), reused across
        tasks: a new one allocates its background and DP matrices, which fine-grained tasks would
        pay again and again."""
        key = (str(alphabet), settings)
        cache = self._per_thread.__dict__.setdefault("pipelines", {})
        if key not in cache:
            cache[key] = pyhmmer.plan7.Pipeline(alphabet, **settings.arguments())
        return cache[key]

    def scan_profiles(self, search_key, models):
        """profile(m): this thread's copy of model m's OptimizedProfile, for a scan."""
        copies = self._per_thread.__dict__.setdefault("profiles", {})
        return self.models.scan_profiles(search_key, models, copies)

    def prepare(self, lengths, backend, shard_memory, models=None, threads=None):
        """Set the memory resident shards may take (bytes, or None for the default) and, on the
        GPU backend, how many of the worker's `threads` may run SSV at once; start loading the
        kernels that models of these `lengths` need, and, given the search's `models` on disk,
        configuring them all, each in a background thread that overlaps reading the database."""
        self.shards.budget = shard_memory
        if backend != "gpu":
            return
        if threads:
            self.threads = threads
            if self.gpu_tail is not None:
                self.gpu_tail.threads = threads
            self.sieve_slots = threading.BoundedSemaphore(max(1, round(SIEVE_SHARE * threads)))

        def load_kernels():
            try:
                self.engine().preload(lengths)
            except Exception as error:  # the task that needs the kernel raises it in full
                log.debug("loading kernels ahead failed: %s", error)

        threading.Thread(target=load_kernels, name="gpuhmm-kernel-load", daemon=True).start()
        if isinstance(models, ModelsOnDisk):
            self.models.configure_ahead(models, lengths)

    def _default_shard_budget(self, backend):
        """Half the GPU's memory, or half the host's on the CPU backend."""
        return (self.engine().memory_bytes if backend == "gpu" else host_memory_bytes()) // 2


def worker_name():
    """host:process id, asked per task: workers forked from a fork server that imported this
    module share its import-time process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


#: This process's worker state.
STATE = WorkerState()


def prepare_worker(lengths, backend, shard_memory, models=None, threads=None):
    """Runs on every worker as a search starts (`cluster.DaskExecutor.prepare_workers`)."""
    STATE.prepare(lengths, backend, shard_memory, models, threads)
