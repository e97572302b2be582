"""Choosing the cluster: GPUs counted without CUDA, and several workers given a shard each."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import dask
import distributed
import pytest
import yaml

from conftest import DATA, GOLDEN, ROOT, TABLES, assert_tables_equal
from gpuhmm import cluster
from gpuhmm.cli import main


@pytest.mark.parametrize("visible, count", [("0,1,2", 3), ("GPU-5f2c,GPU-77ab", 2), ("1,-1,0", 1), ("", 0), ("-1", 0)])
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch, visible, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(cluster.importlib.util, "find_spec", lambda name: object())
    assert cluster.local_gpus("gpu") == count
    assert cluster.local_gpus("auto") == count
    assert cluster.local_gpus("cpu") == 0


def test_auto_without_dask_cuda_keeps_the_local_cluster(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(cluster.importlib.util, "find_spec", lambda name: None)
    assert cluster.local_gpus("auto") == 0
    assert cluster.local_gpus("gpu") == 2


def test_a_cluster_of_workers_gets_a_shard_each_and_hmmsearchs_tables(tmp_path):
    outputs = {kind: tmp_path / f"out.{kind}" for kind in TABLES}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.CRITICAL) as local:
        status = main([
            "search", "--backend", "cpu", "--scheduler", local.scheduler_address, "--db-shards", "1",
            "--summary", str(tmp_path / "summary.json"),
            *[word for kind, path in outputs.items() for word in (f"--{kind}", str(path))],
            str(DATA / "pfam-test.h3m.gz"), str(DATA / "proteins.faa"),
        ])
    assert status == 0
    assert json.loads((tmp_path / "summary.json").read_text())["db_shards"] == 2
    for kind in TABLES:
        assert_tables_equal(outputs[kind], GOLDEN / f"proteins.defaults.{kind}")


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


def _leave_mark(directory):
    Path(directory, str(os.getpid())).touch()


def test_start_everywhere_reaches_every_worker(tmp_path):
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=logging.CRITICAL) as local:
        with cluster.DaskExecutor(local.scheduler_address) as executor:
            executor.start_everywhere(_leave_mark, str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 2
