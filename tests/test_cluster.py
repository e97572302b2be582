"""Choosing the cluster: GPUs counted without CUDA, and several workers given a shard each."""

from __future__ import annotations

import collections
import copy
import dataclasses
import io
import json
import logging
import os
import pickle
import socket
import sys
import threading
import time
import types
import urllib.parse
from pathlib import Path

import dask
import distributed
import numpy as np
import pyhmmer
import pytest
import yaml

from gpuhmm import cluster, engine, local, placement
from gpuhmm.cli import main
from gpuhmm.db import database as seqdb
from gpuhmm.db.models import ModelsOnDisk, read_models
from gpuhmm.engine import cudadriver
from gpuhmm.hits import tophits
from gpuhmm.messages import PipelineSettings, SearchTask, SharedContext
from gpuhmm.options import EngineSettings, SearchOptions
from gpuhmm.worker import STATE, run_task
from gpuhmm.worker.models import ConfiguredModels
from gpuhmm.worker.shards import ResidentShards
from gpuhmm.worker.state import worker_name

from helpers.data import DATA, GOLDEN, ROOT, TABLES, assert_tables_equal


@pytest.mark.parametrize("visible, count", [("0,1,2", 3), ("GPU-5f2c,GPU-77ab", 2), ("1,-1,0", 1), ("", 0), ("-1", 0)])
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch, visible, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(cluster.importlib.util, "find_spec", lambda name: object())
    assert cluster.local_gpus("gpu") == count
    assert cluster.local_gpus("auto") == count
    assert cluster.local_gpus("cpu") == 0
    assert cluster.local_gpus("gpu", scheduler="tcp://127.0.0.1:8786") == 0  # its workers have them


def test_auto_without_dask_cuda_keeps_the_local_cluster(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(cluster.importlib.util, "find_spec", lambda name: None)
    assert cluster.local_gpus("auto") == 0
    assert cluster.local_gpus("gpu") == 2


def test_a_cluster_of_workers_gets_a_shard_each_and_hmmsearchs_tables(tmp_path):
    outputs = {kind: tmp_path / f"out.{kind}" for kind in TABLES}
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.CRITICAL
    ) as local:
        status = main(
            [
                "search",
                "--backend",
                "cpu",
                "--scheduler",
                local.scheduler_address,
                "--db-shards",
                "1",
                "--summary",
                str(tmp_path / "summary.json"),
                *[word for kind, path in outputs.items() for word in (f"--{kind}", str(path))],
                str(DATA / "pfam-test.h3m.gz"),
                str(DATA / "proteins.faa"),
            ]
        )
    assert status == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["db_shards"] == 2
    # Each shard's tasks went to its home worker: both workers searched, every task counted once.
    assert len(summary["workers"]) == 2
    assert sum(worker["tasks"] for worker in summary["workers"].values()) == summary["tasks"]
    # A task's time on its thread's CPU is within its time (each sum rounded per task).
    for worker in summary["workers"].values():
        assert 0 < worker["busy_cpu_s"] <= worker["busy_s"] + 0.001 * worker["tasks"]
    for kind in TABLES:
        assert_tables_equal(outputs[kind], GOLDEN / f"proteins.defaults.{kind}")


class _StandInCUDACluster(distributed.LocalCluster):
    """dask-cuda's LocalCUDACluster as a process LocalCluster (CI has no GPU). As dask-cuda's
    does, it starts its workers by scaling, and shows worker i every GPU, starting from GPU i."""

    def __init__(self, n_workers, threads_per_worker, **common):
        self.gpus = n_workers
        super().__init__(n_workers=0, threads_per_worker=threads_per_worker, processes=True, **common)
        self.scale(n_workers)
        self.sync(self._correct_state)

    def new_worker_spec(self):
        first = len(self.worker_spec)
        spec = copy.deepcopy(self.new_spec)
        spec["options"]["env"] = {
            "CUDA_VISIBLE_DEVICES": ",".join(str((first + offset) % self.gpus) for offset in range(self.gpus))
        }
        # dask-cuda's CUDA-context preload (dask_cuda is not installed here: a worker left
        # with it fails to start).
        spec["options"]["preload"] = [cluster.CONTEXT_PRELOAD]
        spec["options"]["preload_argv"] = [cluster.CONTEXT_PRELOAD_ARGUMENT]
        return {first: spec}


def test_gpu_workers_are_forked_with_the_engine_imported_and_shown_their_own_gpu(monkeypatch):
    """Two local GPUs take dask-cuda's workers, which start from the fork server with gpuhmm's
    engine already imported (spawned, they would not have imported it); each sees only its own
    GPU, and none creates its CUDA context before it joins the cluster."""
    stand_in = types.ModuleType("dask_cuda")
    stand_in.LocalCUDACluster = _StandInCUDACluster
    monkeypatch.setitem(sys.modules, "dask_cuda", stand_in)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with placement.start_executor(EngineSettings("gpu", cpus=2)) as executor:
        assert isinstance(executor, cluster.DaskExecutor) and not executor.in_process
        imported = executor.client().run(lambda: "gpuhmm.worker" in sys.modules)
        # A call of its own, after the check: unpickling a function that names `worker` imports it.
        named = executor.client().run(lambda: (worker_name(), os.getpid()))
        visible = executor.client().run(lambda: os.environ.get("CUDA_VISIBLE_DEVICES"))
        preloads = executor.client().run(lambda dask_worker: [preload.name for preload in dask_worker.preloads])
        address, dashboard = executor.client().scheduler.address, executor.client().dashboard_link
        started = executor.client().cluster
        executor.close_in_background()
    # Closing in the background, and then on leaving the block: closed once close returns.
    assert started.status == distributed.core.Status.closed
    executor.close()  # again: nothing left to do
    assert list(imported.values()) == [True, True]
    # Workers run whatever code a client sends: the scheduler and dashboard take local clients only.
    assert address.startswith("tcp://127.0.0.1:")
    assert urllib.parse.urlparse(dashboard).hostname == "127.0.0.1"
    # The run summary tells the forked workers apart: each task names its own process.
    assert len({name for name, _ in named.values()}) == 2
    assert all(name.endswith(f":{pid}") for name, pid in named.values())
    assert sorted(visible.values()) == ["0", "1"]
    assert list(preloads.values()) == [[], []]


class _StandInDriver:
    """libcuda through ctypes: records the calls, and fails the one named in `failing`."""

    def __init__(self, calls, failing=None):
        self.calls, self.failing = calls, failing

    def __getattr__(self, name):
        def call(*arguments):
            self.calls.append(name)
            return 100 if name == self.failing else 0  # 100: CUDA_ERROR_NO_DEVICE

        return call


@pytest.mark.parametrize(
    "backend, gpus, opened",
    [
        ("cpu", 0, []),
        (
            "gpu",
            1,
            ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxSetFlags", "cuDevicePrimaryCtxRetain"],
        ),  # and CuPy's start after it
        ("gpu", 2, ["cuInit"]),
    ],
)
def test_an_executor_of_local_gpus_starts_cuda_as_it_starts(monkeypatch, backend, gpus, opened):
    """Several GPUs' cluster opens the driver (cuInit) before it starts, so that its workers
    find their GPUs set up; one GPU, worked in this process, has its context made at once
    (`local.start_gpu`); the CPU backend leaves CUDA alone."""
    calls = []
    monkeypatch.setattr(placement, "local_gpus", lambda backend, scheduler=None: gpus)
    monkeypatch.setattr(cluster, "_start_worker_forkserver", lambda: None)
    monkeypatch.setattr(cluster.DaskExecutor, "_start", lambda self: None)
    monkeypatch.setattr(engine, "cupy_problem", lambda: None)  # CuPy's import, without CuPy, then fails
    monkeypatch.setattr(cudadriver.ctypes, "CDLL", lambda name: _StandInDriver(calls))
    executor = placement.start_executor(EngineSettings(backend, cpus=2))
    assert isinstance(executor, cluster.DaskExecutor if gpus > 1 else local.LocalExecutor)
    for thread in threading.enumerate():
        if thread.name in ("gpuhmm-cuda-driver", "gpuhmm-cluster-start", local.CUDA_START_THREAD):
            thread.join()
    # In this process, CuPy's own start follows where it is installed.
    assert (calls[: len(opened)] if gpus == 1 else calls) == opened


@pytest.mark.parametrize(
    "failing, calls, retained",
    [
        (None, ["cuInit", "cuDeviceGet", "cuDevicePrimaryCtxSetFlags", "cuDevicePrimaryCtxRetain"], True),
        ("cuInit", ["cuInit"], False),
        ("cuDeviceGet", ["cuInit", "cuDeviceGet"], False),
    ],
)
def test_cuda_starts_through_the_driver_and_leaves_its_failures_to_cupy(monkeypatch, failing, calls, retained):
    made = []
    monkeypatch.setattr(cudadriver.ctypes, "CDLL", lambda name: _StandInDriver(made, failing))
    assert cudadriver.retain_primary_context() is retained
    assert made == calls

    def no_driver(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(cudadriver.ctypes, "CDLL", no_driver)
    assert cudadriver.open_driver() is False
    assert cudadriver.retain_primary_context() is False


def test_jobqueue_profile_asks_slurm_for_a_gpu_worker_per_job():
    """profiles/dask-slurm: the job script dask-jobqueue's SLURMCluster would submit."""
    dask_jobqueue = pytest.importorskip("dask_jobqueue")
    settings = yaml.safe_load((ROOT / "profiles" / "dask-slurm" / "jobqueue.yaml").read_text())["jobqueue"]["slurm"]
    with dask.config.set({f"jobqueue.slurm.{name}": value for name, value in settings.items()}):
        with dask_jobqueue.SLURMCluster(scheduler_options={"dashboard_address": ":0"}) as slurm:
            script = slurm.job_script()
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --gpus=1" in directives
    assert "#SBATCH --cpus-per-task=16" in directives
    assert "#SBATCH -t 04:00:00" in directives
    assert "--nthreads 16" in script and "distributed.cli.dask_worker" in script


def _leave_mark(directory, threads):
    Path(directory, str(os.getpid())).write_text(str(threads))


def test_prepare_workers_reaches_every_worker_and_those_that_join(tmp_path):
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.CRITICAL
    ) as local:
        with cluster.DaskExecutor(local.scheduler_address) as executor:
            executor.prepare_workers(_leave_mark, str(tmp_path))
            assert len(list(tmp_path.iterdir())) == 2
            local.scale(3)  # as a lost worker's replacement would join
            executor.client().wait_for_workers(3, timeout=60)
            deadline = time.monotonic() + 30
            while len(list(tmp_path.iterdir())) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
    assert [mark.read_text() for mark in tmp_path.iterdir()] == ["1"] * 3  # each worker's own thread count


def _sleep_and_name_the_worker(item, shared):
    time.sleep(item)
    return distributed.get_worker().address


def test_the_smallest_tasks_go_to_the_worker_that_runs_ahead_whatever_their_shard():
    # Shard 0's home worker has 1.2 s of work, shard 1's 0.2 s; the four smallest tasks (below
    # FLOATING_SHARE of the cells) are shard 0's, yet the worker that is free first runs them.
    seconds = [0.3] * 4 + [0.05] * 4 + [0.05] * 4
    shards = [0] * 4 + [1] * 4 + [0] * 4
    cells = [100] * 8 + [10] * 4
    assert sum(cells[8:]) < cluster.FLOATING_SHARE * sum(cells) <= sum(cells[7:])
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0", silence_logs=logging.CRITICAL
    ) as local:
        with cluster.DaskExecutor(local.scheduler_address) as executor:
            homes = sorted(executor.client().scheduler_info()["workers"])
            ran = collections.Counter(executor.run(_sleep_and_name_the_worker, seconds, cells, shards, None))
    assert ran == {homes[0]: 4, homes[1]: 8}


def test_the_in_process_clusters_dashboard_listens_on_loopback_only():
    """`gpuhmm cluster`'s cluster of one in-process worker: the dashboard answers on 127.0.0.1
    and refuses this host's other address (the one its link names), where there is one."""
    with cluster._local_cluster(1, 0) as started, distributed.Client(started) as client:
        link = urllib.parse.urlparse(client.dashboard_link)
        socket.create_connection(("127.0.0.1", link.port), timeout=5).close()
        if link.hostname != "127.0.0.1":
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((link.hostname, link.port), timeout=5)


@pytest.mark.parametrize(
    "backend, expected_cells, visible, gpus, counted",
    [
        ("gpu", None, 1, 1, True),
        ("auto", None, 0, 0, True),
        ("cpu", None, 2, 0, False),  # GPUs neither counted nor started
        ("auto", 1.0, 2, 0, False),  # a job too small for the GPU
    ],
)
def test_a_search_without_a_scheduler_on_one_gpu_at_most_runs_in_this_process(
    monkeypatch, backend, expected_cells, visible, gpus, counted
):
    asked = []
    monkeypatch.setattr(placement, "local_gpus", lambda backend, scheduler=None: asked.append(backend) or visible)
    with placement.start_executor(EngineSettings(backend, cpus=3), expected_cells) as executor:
        assert isinstance(executor, local.LocalExecutor) and executor.in_process
        assert (executor.workers, executor.gpus, executor.scheduler) == (3, gpus, None)
        assert executor.describe().endswith(", 3 thread(s)")
    assert asked == ([backend] if counted else [])


def test_resident_shards_keep_within_their_budget(tmp_path):
    database = seqdb.makedb(DATA / "proteins.faa", tmp_path / "db", 3)
    roomy = ResidentShards(lambda backend: 10**9)
    for index in (0, 1, 2, 0, 1, 2):
        roomy.get(database, index, "cpu")
    assert roomy.loads == 3  # each shard read once, then served from memory

    shard = roomy.get(database, 0, "cpu")
    one_shard = shard.footprint()
    assert len(shard.tail_names(np.arange(shard.sequences)).blob) > 0
    assert shard.footprint() == one_shard  # a batch's name table is packed for it, not kept
    tight = ResidentShards(lambda backend: one_shard)
    first = tight.get(database, 0, "cpu")
    tight.get(database, 1, "cpu")  # over budget: shard 0, least recently used, goes
    assert tight.get(database, 1, "cpu") is not first and tight.loads == 2
    assert tight.get(database, 0, "cpu") is not first and tight.loads == 3


def test_a_search_whose_shards_do_not_all_fit_still_gives_hmmsearchs_tables(tmp_path, caplog):
    """A makedb database's shards, held in turn (a sequence file that large streams instead)."""
    outputs = {kind: tmp_path / f"out.{kind}" for kind in TABLES}
    assert main(["makedb", "--shards", "3", str(DATA / "proteins.faa"), str(tmp_path / "db")]) == 0
    gpuhmm_log = logging.getLogger("gpuhmm")
    gpuhmm_log.addHandler(caplog.handler)  # the CLI's own handler does not propagate
    caplog.set_level(logging.INFO, logger="gpuhmm")
    try:
        status = main(
            [
                "search",
                "--backend",
                "cpu",
                "--cpu",
                "2",
                "--model-shards",
                "3",
                "--shard-memory",
                "0.000001",
                *[word for kind, path in outputs.items() for word in (f"--{kind}", str(path))],
                str(DATA / "pfam-test.h3m.gz"),
                str(tmp_path / "db"),
            ]
        )
    finally:
        gpuhmm_log.removeHandler(caplog.handler)
    assert status == 0
    assert "leaves this worker's memory" in caplog.text
    for kind in TABLES:
        assert_tables_equal(outputs[kind], GOLDEN / f"proteins.defaults.{kind}")


def _same_fields(first, second):
    for field in dataclasses.fields(first):
        a, b = getattr(first, field.name), getattr(second, field.name)
        if dataclasses.is_dataclass(a):
            _same_fields(a, b)
        elif isinstance(a, np.ndarray):
            assert np.array_equal(a, b), field.name
        else:
            assert a == b, field.name


def test_a_worker_configures_models_on_disk_ahead_as_its_tasks_would():
    """Given the models on disk, a GPU worker configures every model in the background as the
    search starts; its tasks then take those, equal to what they would configure themselves.
    (Without CuPy the kernels' loading fails quietly; the configuring needs none.)"""
    hmms = read_models(DATA / "pfam-test.h3m.gz")
    on_disk = ModelsOnDisk.of(DATA / "pfam-test.h3m.gz", hmms)
    configured = ConfiguredModels()
    configured.configure_ahead(on_disk, [hmm.M for hmm in hmms])
    assert configured._ahead[on_disk.key].wait(120)
    positions = range(len(hmms))
    ahead = configured._filters[on_disk.key]
    assert list(ahead) == sorted(positions, key=lambda p: (hmms[p].M, p))  # shortest first, as tasks take them
    taken = configured.filter_models(on_disk.key, [3, 1], [hmms[3], hmms[1]])
    assert taken[0] is ahead[3] and taken[1] is ahead[1]
    for position, own in zip(positions, configured.filter_models("a task's own", positions, hmms)):
        _same_fields(ahead[position], own)


def test_a_task_waits_for_its_own_models_not_for_all_being_configured_ahead():
    hmms = read_models(DATA / "pfam-test.h3m.gz")
    key = "a search still being configured ahead"
    configured = ConfiguredModels()
    configured._ahead[key] = threading.Event()  # never set: the rest never come
    configured._configure(key, [2, 0], [hmms[2], hmms[0]])
    taken = []
    task = threading.Thread(target=lambda: taken.append(configured.filter_models(key, [0, 2], [hmms[0], hmms[2]])))
    task.start()
    task.join(60)
    assert not task.is_alive()
    assert taken[0] == [configured._filters[key][0], configured._filters[key][2]]

    waiting = threading.Thread(target=lambda: taken.append(configured.filter_models(key, [1], [hmms[1]])))
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive()  # model 1 is not configured yet: the task waits for the worker's
    configured._configure(key, [1], [hmms[1]])
    waiting.join(60)
    assert not waiting.is_alive() and taken[1] == [configured._filters[key][1]]


def test_task_results_travel_without_their_models():
    """A task's hits go back to the client without their models (the client has them), and
    come back whole: the same rows as the TopHits the task found."""
    hmms = read_models(DATA / "pfam-test.h3m.gz")
    database = seqdb.makedb(DATA / "proteins.faa", None)
    try:
        shared = SharedContext.of(hmms, database, PipelineSettings.of(SearchOptions()), "cpu")
        task = SearchTask(tuple(range(len(hmms))), 0, 0)
        result = run_task(task, shared)
    finally:
        seqdb.release(database)
        STATE.shards.release(database)
    assert ("pyhmmer.plan7", "HMM") not in _classes_unpickled(pickle.dumps(result))
    reference = pyhmmer.plan7.Pipeline(hmms[0].alphabet)
    with pyhmmer.easel.SequenceFile(DATA / "proteins.faa", digital=True, alphabet=hmms[0].alphabet) as handle:
        sequences = handle.read_block()
    for hmm, state in zip(hmms, result.hits):
        hits, expected = tophits.attached(state, hmm), reference.search_hmm(hmm, sequences)
        assert hits.query is hmm
        assert _rows(hits) == _rows(expected)


def _classes_unpickled(data):
    found = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            found.add((module, name))
            return super().find_class(module, name)

    Recording(io.BytesIO(data)).load()
    return found


def _rows(hits):
    table = io.BytesIO()
    hits.write(table, format="targets", header=False)
    return table.getvalue()
