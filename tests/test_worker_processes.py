"""Searches whose models live in memory (phmmer's and jackhmmer's, built from sequences; a
scan's, read from a compressed file) on Dask workers in other processes, as on several GPUs:
what goes to the workers and back must pickle, whatever the sequences are named, and the tables
stay HMMER's."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import distributed
import pytest

from gpuhmm.cli import main

from helpers.cli import run_golden
from helpers.data import DATA, GOLDEN, hmmer_binary, table_body


@pytest.fixture(scope="module")
def on_workers():
    """The options that run a search on a cluster of two single-threaded worker processes."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.CRITICAL
    ) as cluster:
        yield ("--backend", "cpu", "--scheduler", cluster.scheduler_address)


def test_phmmer_on_worker_processes(tmp_path, on_workers):
    run_golden(tmp_path, "phmmer", "phmmer", "defaults", *on_workers)


def test_scan_on_worker_processes(tmp_path, on_workers):
    run_golden(tmp_path, "scan", "scan_heldout", "defaults", *on_workers)


def test_jackhmmer_on_worker_processes(tmp_path, on_workers):
    spec = json.loads((GOLDEN / "jackhmmer-runs.json").read_text())["N3"]
    tables = tmp_path / "N3.tblout"
    inputs = [str(DATA / spec["queryfile"]), str(DATA / spec["seqfile"])]
    status = main(["jackhmmer", *spec["options"], "-o", os.devnull, "--tblout", str(tables), *on_workers, *inputs])
    assert status == 0
    assert table_body(tables) == table_body(GOLDEN / "jackhmmer.N3.tblout")


def test_a_query_named_main_on_worker_processes(tmp_path, on_workers):
    """Dask hands any pickle that holds "__main__" to cloudpickle, which cannot pickle pyhmmer's
    objects: a query of that name (its hits' results hold it) must still come back."""
    queries = tmp_path / "queries.faa"
    queries.write_text((DATA / "jackhmmer-short.faa").read_text().replace(">heldemit_PTS_EIIB_1", ">__main__", 1))
    ours, theirs = tmp_path / "ours.tbl", tmp_path / "theirs.tbl"
    database = str(DATA / "proteins.faa")
    # In a process of its own, as `python -m gpuhmm`: a lost result would leave it waiting.
    command = [sys.executable, "-m", "gpuhmm", "phmmer", "-o", os.devnull, "--tblout", ours, *on_workers]
    subprocess.run([*command, queries, database], check=True, capture_output=True, timeout=300)
    subprocess.run([hmmer_binary("phmmer"), "-o", os.devnull, "--tblout", theirs, queries, database], check=True)
    assert "__main__" in table_body(theirs)
    assert table_body(ours) == table_body(theirs)
