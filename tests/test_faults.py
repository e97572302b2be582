"""Faults a long scan meets: the GPU running out of memory, and a Dask worker dying mid-scan,
on the CPU and on a dask-cuda worker per GPU. Either way the tables must still be hmmsearch's."""

from __future__ import annotations

import logging
import os

import pytest
from distributed.diagnostics.plugin import WorkerPlugin

from gpuhmm import placement
from gpuhmm.cluster import NO_STEALING, DaskExecutor
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.worker import STATE

from helpers.cli import assert_golden_tables, golden_runs, run_tables
from helpers.data import DATA

RUNS = golden_runs()


def _search(tmp_path, run, *options):
    return run_tables(
        tmp_path, "search", "--cpu", 2, *options, DATA / RUNS[run]["hmmfile"], DATA / RUNS[run]["seqfile"]
    )


class ScarceMemoryEngine(ReferenceEngine):
    """The numpy kernels on a device with room for the SSV output of at most `room` models at
    once; more raises MemoryError, the base of CuPy's OutOfMemoryError."""

    def __init__(self, room):
        super().__init__(90, warps=8)
        self.room = room
        self.refused = 0

    def f1_sieve(self, groups, shard):
        models = sum(len(group_models) for _, _, group_models, _ in groups)
        if models > self.room:
            self.refused += 1
            raise MemoryError(f"out of memory to allocate {5 * models * shard.sequences} bytes")
        return super().f1_sieve(groups, shard)


@pytest.fixture
def scarce_gpu(monkeypatch):
    def install(room):
        engine = ScarceMemoryEngine(room)
        monkeypatch.setattr(placement, "gpu_problem", lambda: None)
        monkeypatch.setattr(STATE, "gpu_engine", engine)
        return engine

    return install


def test_out_of_gpu_memory_splits_the_batch(tmp_path, scarce_gpu, caplog):
    engine = scarce_gpu(room=1)
    gpuhmm_log = logging.getLogger("gpuhmm")
    gpuhmm_log.addHandler(caplog.handler)  # the CLI's own handler does not propagate
    try:
        status, outputs = _search(tmp_path, "tiny_proteins", "--backend", "gpu", "--model-shards", "1")
    finally:
        gpuhmm_log.removeHandler(caplog.handler)
    assert status == 0
    assert_golden_tables(outputs, "tiny_proteins.defaults", RUNS["tiny_proteins"]["cases"]["defaults"])
    assert engine.refused == 2  # 3 models → 1 + 2, then 2 → 1 + 1
    assert "GPU out of memory filtering 3 models against database shard 0" in caplog.text
    assert "GPU out of memory filtering 2 models against database shard 0" in caplog.text


def test_out_of_gpu_memory_for_one_model_stops_with_advice(tmp_path, scarce_gpu, capsys):
    scarce_gpu(room=0)
    status, outputs = _search(tmp_path, "tiny_proteins", "--backend", "gpu")
    assert status != 0
    error = capsys.readouterr().err
    assert "database shard 0" in error and "--db-shards" in error
    assert not any(path.exists() for path in outputs.values())


class DieOnce(WorkerPlugin):
    """A worker plugin: the first worker to start a task of the scan dies at once, as a killed
    process does (no clean-up); a marker file keeps its restarted self and the others alive."""

    name = "gpuhmm-test-die-once"

    def __init__(self, marker):
        self.marker = str(marker)

    def transition(self, key, start, finish, **kwargs):
        if finish == "executing" and "run_task" in str(key):
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
            os._exit(9)


@pytest.mark.parametrize("stealing", [True, False], ids=["stealing", "no-stealing (GPU workers)"])
def test_a_worker_dying_mid_scan_changes_no_table(tmp_path, stealing):
    """Tasks prefer their shard's home worker; when it dies, they go elsewhere, with or without
    Dask's work stealing (off for the GPU workers started here: `cluster.NO_STEALING`)."""
    import dask
    import distributed

    marker = tmp_path / "died"
    with (
        dask.config.set({} if stealing else NO_STEALING),
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.CRITICAL
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.register_plugin(DieOnce(marker))
        status, outputs = _search(
            tmp_path,
            "proteins",
            "--backend",
            "cpu",
            "--scheduler",
            cluster.scheduler_address,
            "--db-shards",
            "3",
            "--model-shards",
            "4",
        )
    assert marker.exists()  # a worker did die with a task of the scan under way
    assert status == 0
    assert_golden_tables(outputs, "proteins.defaults", RUNS["proteins"]["cases"]["defaults"])


class ScarceGpuMemory(WorkerPlugin):
    """A worker plugin: the worker's GPU engine refuses, as CuPy does, an SSV batch of more than
    `room` models, appending the batch's model count to the file `refusals`."""

    name = "gpuhmm-test-scarce-gpu-memory"

    def __init__(self, room, refusals):
        self.room = room
        self.refusals = str(refusals)

    def setup(self, worker):
        import cupy

        engine = STATE.engine()
        sieve, room, refusals = engine.f1_sieve, self.room, self.refusals

        def scarce(groups, shard):
            models = sum(len(group_models) for _, _, group_models, _ in groups)
            if models > room:
                with open(refusals, "a") as handle:
                    handle.write(f"{models}\n")
                raise cupy.cuda.memory.OutOfMemoryError(5 * models * shard.sequences, 0)
            return sieve(groups, shard)

        engine.f1_sieve = scarce


def _on_two_gpus(tmp_path, plugin, run, *options):
    """`_search` on the GPU backend against a dask-cuda worker per GPU of two, with `plugin`
    registered on both workers (and on any that replaces one)."""
    with DaskExecutor(workers=4, gpus=2) as executor:
        client = executor.client()
        client.register_plugin(plugin)
        return _search(tmp_path, run, "--backend", "gpu", "--scheduler", client.scheduler.address, *options)


@pytest.mark.gpu
def test_a_gpu_worker_dying_mid_scan_changes_no_table(tmp_path, two_gpus):
    marker = tmp_path / "died"
    status, outputs = _on_two_gpus(tmp_path, DieOnce(marker), "proteins", "--db-shards", "3", "--model-shards", "4")
    assert marker.exists()
    assert status == 0
    assert_golden_tables(outputs, "proteins.defaults", RUNS["proteins"]["cases"]["defaults"])


@pytest.mark.gpu
def test_out_of_gpu_memory_on_two_gpus_splits_the_batch(tmp_path, two_gpus):
    refusals = tmp_path / "refusals"
    status, outputs = _on_two_gpus(tmp_path, ScarceGpuMemory(1, refusals), "tiny_proteins", "--model-shards", "1")
    assert status == 0
    assert_golden_tables(outputs, "tiny_proteins.defaults", RUNS["tiny_proteins"]["cases"]["defaults"])
    # A database shard per worker; on each, 3 models → 1 + 2, then 2 → 1 + 1.
    assert sorted(refusals.read_text().split()) == ["2", "2", "3", "3"]


@pytest.mark.gpu
def test_out_of_gpu_memory_for_one_model_on_two_gpus_stops_with_advice(tmp_path, two_gpus, capsys):
    status, outputs = _on_two_gpus(tmp_path, ScarceGpuMemory(0, tmp_path / "refusals"), "tiny_proteins")
    assert status != 0
    error = capsys.readouterr().err
    assert "the GPU ran out of memory filtering model" in error and "--db-shards" in error
    assert not any(path.exists() for path in outputs.values())
