"""gpuhmm's tables against hmmsearch 3.4's golden tables, for every option case and sharding."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pyhmmer
import pytest

from gpuhmm import placement
from gpuhmm.cli import main
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.worker import STATE
from gpuhmm.worker.state import SIEVE_SHARE

from helpers.cli import golden_runs, run_golden
from helpers.data import DATA, TABLES, binary_models, hmmer_binary, table_body

RUNS = golden_runs()

#: (database shards, model shards): unsharded, the acceptance split, and more shards than tasks need.
SHARDINGS = [(1, 1), (3, 2), (5, 7)]


def _engine(db_shards, model_shards, backend="cpu", cpus=2):
    """The engine options of a run: backend, threads and sharding."""
    return ("--backend", backend, "--cpu", cpus, "--db-shards", db_shards, "--model-shards", model_shards)


@pytest.mark.parametrize("case", list(RUNS["proteins"]["cases"]))
@pytest.mark.parametrize("db_shards,model_shards", SHARDINGS)
def test_proteins_identical_to_hmmsearch(tmp_path, case, db_shards, model_shards):
    run_golden(tmp_path, "search", "proteins", case, *_engine(db_shards, model_shards))


@pytest.mark.parametrize("run,case", [(run, case) for run in RUNS if run != "proteins" for case in RUNS[run]["cases"]])
def test_other_inputs_identical_to_hmmsearch(tmp_path, run, case):
    run_golden(tmp_path, "search", run, case, *_engine(3, 2))


@pytest.fixture
def reference_gpu(monkeypatch):
    """The GPU backend's whole path (filter, survivors, pyhmmer tail, restated statistics),
    with the numpy model of the kernels standing in for the device."""
    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))


@pytest.mark.parametrize("case", list(RUNS["heldout"]["cases"]))
def test_gpu_path_with_reference_engine_identical_to_hmmsearch(tmp_path, reference_gpu, case):
    run_golden(tmp_path, "search", "heldout", case, *_engine(3, 2, backend="gpu"))


class CountingEngine(ReferenceEngine):
    """The numpy kernels, slowed down, counting the tasks in their SSV at once."""

    def __init__(self):
        super().__init__(90, warps=8)
        self.running = self.most = 0
        self.lock = threading.Lock()

    def f1_sieve(self, groups, shard):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(0.5)
            return super().f1_sieve(groups, shard)
        finally:
            with self.lock:
                self.running -= 1


def test_a_share_of_a_workers_threads_runs_ssv_at_once(tmp_path, monkeypatch):
    """With 8 threads, 2 run SSV at most, so that tasks leave it one after another; 12 tasks
    keep every thread busy. The tables stay hmmsearch's."""
    engine = CountingEngine()
    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", engine)
    monkeypatch.setattr(STATE, "sieve_slots", None)
    run_golden(tmp_path, "search", "heldout", "defaults", *_engine(3, 4, backend="gpu", cpus=8))
    assert engine.most == round(SIEVE_SHARE * 8) == 2


@pytest.mark.gpu
@pytest.mark.parametrize("run,case", [(run, case) for run in RUNS for case in RUNS[run]["cases"]])
def test_gpu_backend_identical_to_hmmsearch(tmp_path, run, case):
    run_golden(tmp_path, "search", run, case, *_engine(3, 2, backend="gpu"))


@pytest.mark.parametrize("models", [1, 2])
def test_fewer_models_than_threads_split_the_shard_as_hmmsearch_reads_it(tmp_path, models):
    """Each of few models' tasks is cut into runs of consecutive sequences, a thread's each; the
    tables stay hmmsearch's, the automatic Z and the kept hits' file positions included."""
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        hmm_file = binary_models(list(handle)[:models], tmp_path)
    ours = {kind: tmp_path / f"ours.{kind}" for kind in TABLES}
    theirs = {kind: tmp_path / f"theirs.{kind}" for kind in TABLES}
    summary = tmp_path / "summary.json"
    words = [word for kind, path in ours.items() for word in (f"--{kind}", str(path))]
    arguments = ["search", "--backend", "cpu", "--cpu", "4", "--summary", str(summary), *words]
    assert main([*arguments, str(hmm_file), str(DATA / "proteins.faa")]) == 0
    binary = [hmmer_binary("hmmsearch"), "-o", "/dev/null"]
    binary += [word for kind, path in theirs.items() for word in (f"--{kind}", str(path))]
    subprocess.run([*binary, str(hmm_file), str(DATA / "proteins.faa")], check=True)
    for kind in TABLES:
        assert table_body(ours[kind]) == table_body(theirs[kind]), kind
    assert json.loads(summary.read_text())["tasks"] == 4
