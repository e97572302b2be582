"""The Dask side: the only module that imports dask/distributed (and dask_cuda).

`DaskExecutor` runs a search's tasks where `placement.start_executor` picks Dask: an existing
scheduler (`--scheduler ADDRESS`, e.g. a `dask scheduler` with workers on many nodes, or
`gpuhmm cluster`), or several GPUs on this node, for which dask_cuda's `LocalCUDACluster` runs
one worker process per GPU. Task arguments are serialized, so they stay small (a database is
passed by reference to its files). Where a cluster has several workers, each database shard has
a home worker that its tasks prefer, so that it is loaded once and stays resident there; the
last, smallest tasks go to whichever worker is free first (`FLOATING_SHARE`). `gpuhmm cluster` (`serve`) runs a
cluster that outlives the searches: dask_cuda's for several GPUs, else a `LocalCluster` of one
in-process worker with one thread per core.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import importlib.util
import logging
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import re
import signal
import socket
import ssl
import subprocess
import threading
import time
import uuid

from ._host import available_cpus
from .engine import cudadriver
from .errors import GpuhmmError
from .local import Progress
from .output.files import check_outputs

log = logging.getLogger("gpuhmm")

#: `gpuhmm cluster`'s in-process worker shares the GIL with pyhmmer's threads. Dask's
#: statistical profiler (a stack walk of every thread each 10 ms) and its 20 ms event-loop tick
#: would take it from them all run long; tasks last seconds, so coarse housekeeping loses nothing.
QUIET_WORKER = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.gil.enabled": False,
    "distributed.worker.memory.monitor-interval": "1s",
}

#: A GPU worker holds its database shards resident, and tasks prefer their shard's home.
#: A task stolen by another worker makes that one load the shard (seconds, and memory) for
#: work of about the same length, so the GPU workers' scheduler does not steal. A lost
#: worker's tasks still go elsewhere: their preference is loose.
NO_STEALING = {"distributed.scheduler.work-stealing": False}
#: Where a local cluster listens: its scheduler (dask_cuda's) and its dashboard take no outside connection.
LOOPBACK = "127.0.0.1"

#: The smallest tasks, this share of the cells, have no home worker. Dask queues such tasks
#: (`distributed.scheduler.worker-saturation`) until a worker has a thread free, which a worker
#: has only once its own shards' tasks run out: one that runs ahead then takes on others' work,
#: loading their shards, instead of idling while they finish.
FLOATING_SHARE = 0.1

#: What a GPU worker process imports before it can work: Dask's worker, dask-cuda, and
#: gpuhmm's engine with CuPy (importing CuPy does not start CUDA, so a forked process still can).
#: dask-cuda's workers are forked from multiprocessing's fork server with these imported
#: (`_start_worker_forkserver`), not spawned to import them each after the cluster starts.
WORKER_PRELOAD = ("distributed", "dask_cuda", "gpuhmm.worker", "cupy")
FORKED_WORKERS = {"distributed.worker.multiprocessing-method": "forkserver"}

#: dask-cuda's worker preload that creates the worker's CUDA context as it starts (`_own_gpu_only`).
CONTEXT_PRELOAD, CONTEXT_PRELOAD_ARGUMENT = "dask_cuda.initialize", "--create-cuda-context"


def local_gpus(backend, scheduler=None):
    """The GPUs a cluster started here gives a worker each: none for the CPU backend, nor for
    `auto` without dask_cuda installed (the CPU path then runs as it would anywhere), nor where a
    running `scheduler` is used instead."""
    if scheduler or backend == "cpu" or (backend == "auto" and importlib.util.find_spec("dask_cuda") is None):
        return 0
    return _visible_gpus()


def _visible_gpus():
    """The GPUs this process may use, counted without starting CUDA: CUDA_VISIBLE_DEVICES's
    entries where it is set, else `nvidia-smi --list-gpus`'s (none without it)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = 0
        for entry in visible.split(","):
            if not entry.strip() or entry.strip().startswith("-"):  # CUDA stops at an invalid entry
                break
            count += 1
        return count
    try:
        listing = subprocess.run(["nvidia-smi", "--list-gpus"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listing.stdout.splitlines()) if listing.returncode == 0 else 0


@functools.cache
def _search_plugin():
    """The worker plugin class, defined on first use so that importing this module does not
    import Dask (cloudpickle sends the class itself to the workers)."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class SearchPlugin(WorkerPlugin):
        def __init__(self, setup, arguments):
            self.setup_search, self.arguments = setup, arguments

        def setup(self, worker):
            self.setup_search(*self.arguments, threads=worker.state.nthreads)

    return SearchPlugin


def _start_worker_forkserver():
    """Start multiprocessing's fork server, importing WORKER_PRELOAD, in the background. It
    imports them while this process imports Dask and starts the scheduler, so the workers forked
    from it (FORKED_WORKERS) start with their imports done: spawned, each imported them only
    once the scheduler had started, and the search waited for the slowest.
    Forked workers keep this process's environment: Dask's `distributed.nanny.pre-spawn-environ`
    (thread counts for BLAS, which gpuhmm does not use, and malloc trimming) does not reach them.
    The server outlives a cluster: later ones fork from it too."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(list(WORKER_PRELOAD))
    multiprocessing.forkserver.ensure_running()


def _own_gpu_only(local_cuda_cluster):
    """dask-cuda's LocalCUDACluster, with each worker shown its own GPU only, and left to start
    CUDA in its own time.

    dask-cuda shows every worker all the GPUs, its own first, for transfers between GPUs
    (which gpuhmm does not make), and CUDA then sets up all of them in every worker, which is
    slower; the cluster waits for the slowest worker.

    dask-cuda's preload also creates each worker's CUDA context before the worker joins the
    cluster. The search cannot begin until every worker has joined; without the preload, each
    worker starts CUDA as the search begins, off its interpreter lock (`gpu.device_count`),
    while it reads the models and loads its first shards."""

    class OwnGpuOnly(local_cuda_cluster):
        def new_worker_spec(self):
            specs = super().new_worker_spec()
            for spec in specs.values():
                options = spec["options"]
                environment = options["env"]
                environment["CUDA_VISIBLE_DEVICES"] = str(environment["CUDA_VISIBLE_DEVICES"]).split(",")[0]
                options["preload"] = [name for name in options.get("preload", []) if name != CONTEXT_PRELOAD]
                options["preload_argv"] = [
                    word for word in options.get("preload_argv", []) if word != CONTEXT_PRELOAD_ARGUMENT
                ]
            return specs

    return OwnGpuOnly


def _local_cluster(workers, gpus, **listen):
    """A cluster on this node: dask_cuda's with a worker per GPU where there are several, else one
    in-process worker of `workers` threads. `listen` (host, scheduler_port, protocol, security)
    is for a cluster other processes connect to; by default, loopback only."""
    import dask
    import distributed

    dask.config.set(QUIET_WORKER)
    # Any free dashboard port, on this host's loopback only: many searches may start side by side
    # on one node, and a worker runs whatever code a client sends it. A failed task is re-raised
    # in the client; the worker's own traceback would only bury the one-line error.
    common = {"dashboard_address": f"{LOOPBACK}:0", "silence_logs": logging.CRITICAL, **listen}
    if gpus > 1:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError as error:
            raise GpuhmmError(
                "dask_cuda",
                f"{gpus} GPUs need it for their workers ({error}); "
                "install gpuhmm[gpu], or set CUDA_VISIBLE_DEVICES to one GPU",
            ) from error
        dask.config.set(NO_STEALING)
        common.setdefault("host", LOOPBACK)
        with dask.config.set(FORKED_WORKERS):
            return _own_gpu_only(LocalCUDACluster)(n_workers=gpus, threads_per_worker=max(1, workers // gpus), **common)
    return distributed.LocalCluster(n_workers=1, threads_per_worker=workers, processes=False, **common)


@dataclasses.dataclass(frozen=True)
class WarmCluster:
    """`gpuhmm cluster`: where it listens, its workers, its TLS files (all three, or none), and
    the file it writes its address to."""

    backend: str = "auto"
    cpus: int | None = None
    host: str = LOOPBACK
    port: int = 0
    scheduler_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    def check(self):
        """Refuse, before Dask is imported or a cluster started, what would stop it: TLS files
        missing or not PEM, a host or port it cannot listen on, a scheduler file it cannot write.
        TLS is required for any host but loopback."""
        tls = (self.tls_ca_file, self.tls_cert, self.tls_key)
        if any(tls) and not all(tls):
            raise GpuhmmError("--tls-ca-file, --tls-cert, --tls-key", "give all three, or none")
        if all(tls):
            _check_tls(*tls)
        elif self.host not in (LOOPBACK, "localhost"):
            raise GpuhmmError(
                f"--host {self.host}",
                "a worker runs whatever code a client sends it: listening beyond this host "
                "needs TLS (--tls-ca-file, --tls-cert, --tls-key)",
            )
        _check_port(self.host, self.port)
        if self.scheduler_file:
            check_outputs({"--scheduler-file": self.scheduler_file})

    def listen(self):
        """The listening arguments of `_local_cluster`; TLS is mutual (clients need a certificate
        the CA signed)."""
        if not self.tls_ca_file:
            return {"host": self.host, "scheduler_port": self.port, "protocol": "tcp://"}
        from distributed.security import Security

        ca, cert, key = self.tls_ca_file, self.tls_cert, self.tls_key
        security = Security(
            tls_ca_file=ca,
            **{
                f"tls_{role}_{part}": path
                for role in ("scheduler", "worker", "client")
                for part, path in (("cert", cert), ("key", key))
            },
            require_encryption=True,
        )
        return {"host": self.host, "scheduler_port": self.port, "protocol": "tls://", "security": security}


def _check_tls(ca, cert, key):
    """Refuse a TLS file that cannot be read, a CA or certificate file without a PEM
    certificate, and a key that is not the certificate's, naming the file."""
    for option, path in (("--tls-ca-file", ca), ("--tls-cert", cert), ("--tls-key", key)):
        try:
            if option == "--tls-key":
                ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
            else:
                ssl.create_default_context().load_verify_locations(cafile=path)
        except ssl.SSLError as error:
            problem = "no PEM certificate in it" if option != "--tls-key" else "not a PEM private key"
            if error.reason == "KEY_VALUES_MISMATCH":
                problem = f"not the key of --tls-cert {cert}"
            raise GpuhmmError(path, f"{option}: {problem}") from None
        except OSError as error:
            raise GpuhmmError(path, f"{option}: cannot read ({error.strerror or error})") from None


def _check_port(host, port):
    """Refuse a host or port that cannot be listened on (another process's port, an address not
    of this host), binding each of its addresses as Tornado will: Dask would say only that its
    scheduler failed to start."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise GpuhmmError(f"--host {host}", f"unknown host ({error.strerror})") from None
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as error:
                if family == socket.AF_INET6 and error.errno == errno.EADDRNOTAVAIL:
                    continue  # no IPv6 loopback here: Tornado skips it too
                where = f"--port {port}" if port else f"--host {host}"
                raise GpuhmmError(where, f"cannot listen on {host} port {port} ({error.strerror})") from None


def serve(settings, stopped=None):
    """Run a warm cluster until SIGINT or SIGTERM (or until `stopped`, a threading.Event, is
    set): its workers keep their shards, models and kernels from one search to the next. Prints
    its address and writes it to `settings.scheduler_file`, which is removed when it stops."""
    settings.check()
    import distributed

    listen = settings.listen()
    gpus = local_gpus(settings.backend)
    cluster = _local_cluster(settings.cpus or available_cpus(), gpus, **listen)
    stopped = stopped or threading.Event()
    try:
        if settings.scheduler_file:
            with distributed.Client(cluster) as client:
                client.write_scheduler_file(settings.scheduler_file)
        for name in ("SIGINT", "SIGTERM"):
            if threading.current_thread() is threading.main_thread():
                signal.signal(getattr(signal, name), lambda *_: stopped.set())
        print(f"gpuhmm cluster: scheduler at {cluster.scheduler_address}", flush=True)
        while not stopped.wait(1.0):
            pass
    finally:
        cluster.close()
        if settings.scheduler_file:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(settings.scheduler_file)


#: A scheduler's address: a protocol's URL (tcp://, tls://, ...) or HOST:PORT.
_ADDRESS = re.compile(r"[a-z][a-z0-9+.-]*://\S+|[^/\s]+:\d+")


def _scheduler_target(scheduler):
    """How to reach `--scheduler`: a scheduler file (`gpuhmm cluster --scheduler-file`) that
    exists, else an address; anything else is refused, naming what was expected."""
    if os.path.isfile(scheduler):
        return {"scheduler_file": scheduler}
    if _ADDRESS.fullmatch(scheduler):
        return {"address": scheduler}
    raise GpuhmmError(
        f"--scheduler {scheduler}", "no such scheduler file, and not a scheduler address (tcp://HOST:PORT)"
    )


def _pickled(function, item, shared):
    """function(item, shared) on a worker, returned pickled by pickle: Dask hands a result whose
    bytes hold "__main__" (a sequence of that name) to cloudpickle, which fails on pyhmmer's objects."""
    return pickle.dumps(function(item, shared), protocol=pickle.HIGHEST_PROTOCOL)


class DaskExecutor:
    """Runs tasks on Dask and yields their results as they complete, reporting progress: on a
    running `scheduler`'s workers, or on a cluster of a worker per local GPU (`gpus`, several).

    The cluster starts in a background thread at construction, so that importing Dask and
    starting workers overlaps with reading the inputs.
    """

    in_process = False  # the workers are other processes, which read the database's files

    def __init__(self, scheduler=None, workers=1, gpus=0):
        self.scheduler = scheduler
        self._target = _scheduler_target(scheduler) if scheduler else None
        self.workers = workers
        self.gpus = 0 if scheduler else gpus
        self._client = None
        self._cluster = None
        self._error = None
        self._closing = None
        self._closing_lock = threading.Lock()
        self._asked_at = time.perf_counter()
        if self.gpus:
            # Without persistence mode, the driver sets a GPU up when the first process opens it
            # and tears it down when the last one closes it: held open here, the workers' CUDA
            # start is shorter. The workers are forked from the fork server, which never starts CUDA.
            threading.Thread(target=cudadriver.open_driver, name="gpuhmm-cuda-driver", daemon=True).start()
        if self.gpus > 1:
            _start_worker_forkserver()
        self._starting = threading.Thread(target=self._start, name="gpuhmm-cluster-start", daemon=True)
        self._starting.start()

    def _start(self):
        try:
            import distributed

            imported = time.perf_counter() - self._asked_at
            if self.scheduler:
                self._client = distributed.Client(**self._target, timeout="30s")
                log.info("connected to the Dask scheduler in %.1fs", time.perf_counter() - self._asked_at)
                return
            self._cluster = _local_cluster(self.workers, self.gpus)
            self._client = distributed.Client(self._cluster)
            log.info(
                "Dask cluster started in %.1fs (Dask imported in %.1fs)", time.perf_counter() - self._asked_at, imported
            )
        except BaseException as error:  # re-raised in the caller's thread by client()
            self._error = error

    def client(self):
        self._starting.join()
        if self._error is not None:
            if self.scheduler:
                raise GpuhmmError(
                    f"--scheduler {self.scheduler}", f"cannot connect to the Dask scheduler ({self._error})"
                )
            raise self._error
        return self._client

    def _workers(self):
        """The cluster's workers now: address → Dask's description."""
        return self.client().scheduler_info().get("workers", {})

    def describe(self):
        workers = self._workers()
        threads = sum(worker.get("nthreads", 0) for worker in workers.values())
        where = self.scheduler or ("LocalCUDACluster" if self.gpus > 1 else "LocalCluster")
        return f"Dask {where}: {len(workers)} worker(s), {threads} thread(s)"

    def prepare_workers(self, setup, *arguments):
        """Run setup(*arguments, threads=the worker's thread count) on every worker now, and on
        any worker that joins later (one that replaces a lost worker, say), through a Dask
        worker plugin. A later search's plugin replaces this one. setup should start long work
        in the background and return at once."""
        self.client().register_plugin(_search_plugin()(setup, arguments), name="gpuhmm-search")

    def worker_count(self):
        return len(self._workers())

    def run(self, function, items, cells, shards, shared, label="search"):
        """Yield function(item, shared) for every item as it completes; `cells` weighs each item
        (items come largest first) and `shards` names its database shard: with as many shards as
        workers or more, shard s's items prefer worker s mod workers, but for the last
        `FLOATING_SHARE` of the cells, which go to the first worker free. The preference is
        loose: a lost worker's items go elsewhere, and a scheduler that steals work (not ours for
        GPU workers, `NO_STEALING`) may give them to an idle worker, which then loads the shard.
        `shared` (the models and options every item needs) is sent to every worker once, not
        with each item: serializing it per item cost seconds per hundred tasks. `label` opens
        the progress lines."""
        import distributed

        client = self.client()
        submitting = time.perf_counter()
        workers = sorted(self._workers())
        homes = len(workers) > 1 and len(set(shards)) >= len(workers)
        total_cells = sum(cells) or 1
        [shared_future] = client.scatter([shared], broadcast=True, hash=False)
        futures = {}
        homed_cells = (1 - FLOATING_SHARE) * total_cells
        submitted_cells = 0
        for index, (item, weight, shard) in enumerate(zip(items, cells, shards)):
            placement = {}
            if homes and submitted_cells < homed_cells:
                placement = {"workers": [workers[shard % len(workers)]], "allow_other_workers": True}
            submitted_cells += weight
            # Larger tasks were put first; a higher priority keeps Dask from reordering them.
            key = f"{function.__name__}-{uuid.uuid4().hex}"
            future = client.submit(
                _pickled, function, item, shared_future, key=key, priority=len(items) - index, **placement
            )
            futures[future] = weight
        progress = Progress(cells, submitting, label)
        # Results are gathered as tasks complete, not one request per result in this loop:
        # tasks that end together would otherwise wait for each other's transfers in turn.
        for future, result in distributed.as_completed(futures, with_results=True):
            progress.completed(futures[future])
            yield pickle.loads(result)

    def close_in_background(self):
        """Start closing the cluster, and return: once the tasks' results are in, the client's
        own work (merging, writing tables) need not wait for the workers to shut down.
        `close()` then waits for it."""
        with self._closing_lock:
            if self._closing is None:
                self._closing = threading.Thread(target=self._close, name="gpuhmm-cluster-close", daemon=True)
                self._closing.start()

    def close(self):
        self.close_in_background()
        self._closing.join()

    def _close(self):
        self._starting.join()
        closing = time.perf_counter()
        try:
            if self._client is not None:
                self._client.close()
            if self._cluster is not None:
                self._cluster.close()
        except Exception as error:  # the results are in: a worker slow to stop does not undo them
            log.warning("closing the Dask cluster: %s", error)
            return
        if self._cluster is not None:
            log.info("Dask cluster closed in %.1fs", time.perf_counter() - closing)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
