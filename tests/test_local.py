"""A search in this process without Dask: the pool of threads, the choice of `--backend auto`,
and the time to the first kernel in the run summary."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

from gpuhmm import local, options, placement
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.worker import STATE

from helpers.cli import assert_golden_tables, golden_runs, run_tables
from helpers.data import DATA, ROOT, TABLES

RUNS = golden_runs()
TINY = RUNS["tiny_proteins"]


def _record(item, shared):
    shared.append(item)
    return item * 10


def test_one_thread_runs_the_tasks_in_the_order_given_and_yields_every_result():
    ran = []
    items = [5, 3, 9, 1, 7]
    with local.LocalExecutor(workers=1) as executor:
        results = list(executor.run(_record, items, [50, 30, 90, 10, 70], [0] * 5, ran))
    assert ran == items
    assert sorted(results) == [10, 30, 50, 70, 90]


def test_results_come_as_their_tasks_complete_not_in_the_order_given():
    fast_done = threading.Event()

    def task(item, shared):
        if item == "slow":
            assert fast_done.wait(60), "the fast task's result was held back behind the slow task"
        return item

    seen = []
    with local.LocalExecutor(workers=2) as executor:
        for result in executor.run(task, ["slow", "fast"], [2, 1], [0, 0], None):
            seen.append(result)
            if result == "fast":
                fast_done.set()
    assert seen == ["fast", "slow"]


def test_a_tasks_error_is_raised_in_the_caller_and_later_tasks_are_dropped():
    ran = []

    def task(item, shared):
        ran.append(item)
        if item == "bad":
            raise ValueError(f"database shard 3: {item} residues")
        return item

    executor = local.LocalExecutor(workers=1)
    with pytest.raises(ValueError, match="database shard 3: bad residues"):
        with executor:
            list(executor.run(task, ["good", "bad", "later", "last"], [4, 3, 2, 1], [0] * 4, None))
    executor.close()
    assert ran == ["good", "bad"]


def test_progress_is_logged_as_the_tasks_start_and_once_the_last_completes(caplog, monkeypatch):
    """The first line comes before any task ends: a long task's run is not silent until then."""
    monkeypatch.setattr(logging.getLogger("gpuhmm"), "propagate", True)  # the CLI's handler stops it
    caplog.set_level(logging.INFO, logger="gpuhmm")
    logged_before_the_end = []

    def task(item, shared):
        logged_before_the_end.append(caplog.text)
        return item

    with local.LocalExecutor(workers=1) as executor:
        list(executor.run(task, [1, 2, 3], [300, 200, 100], [0] * 3, None, label="jackhmmer round 2"))
    assert "jackhmmer round 2: 0/3 tasks of 600 cells, submitted in" in logged_before_the_end[0]
    assert "jackhmmer round 2: 3/3 tasks, 100% of cells" in caplog.text


def test_a_pool_closing_in_the_background_is_shut_down_once_close_returns():
    before = set(threading.enumerate())  # an earlier test's pool may still be closing
    executor = local.LocalExecutor(workers=2)
    assert list(executor.run(_record, [1, 2], [2, 1], [0, 0], [])) in ([10, 20], [20, 10])
    executor.close_in_background()
    executor.close()
    assert not [t for t in set(threading.enumerate()) - before if t.name.startswith("gpuhmm-task")]
    with pytest.raises(RuntimeError):
        list(executor.run(_record, [1], [1], [0], []))
    executor.close()  # again: nothing left to do


class PreloadRecordingEngine(ReferenceEngine):
    def __init__(self):
        super().__init__(90, warps=8)
        self.preloaded = []

    def preload(self, lengths):
        self.preloaded.append(tuple(lengths))


def test_an_executor_that_may_use_the_gpu_starts_it_as_it_is_made(monkeypatch):
    """CUDA's context through the driver, then the engine and the kernels every search runs,
    each in a background thread; without CuPy, nothing (the search reports why)."""
    from gpuhmm import engine
    from gpuhmm.engine import cudadriver

    started = []
    monkeypatch.setattr(cudadriver, "retain_primary_context", lambda: started.append("context"))
    monkeypatch.setattr(engine, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", PreloadRecordingEngine())
    for installed, warm in ((False, True), (True, False), (True, True)):
        problem = None if installed else "no module named 'cupy'"
        monkeypatch.setattr(engine, "cupy_problem", lambda problem=problem: problem)
        with local.LocalExecutor(workers=2, gpus=1, warm_gpu=warm):
            for thread in threading.enumerate():
                if thread.name in (local.CUDA_START_THREAD, local.WARM_UP_THREAD):
                    thread.join()
    assert started == ["context"] and STATE.gpu_engine.preloaded == [()]


def _imported_modules(*arguments, cwd):
    """The modules a `gpuhmm` command, run as a user runs it, imports (`python -X importtime`)."""
    process = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gpuhmm", *map(str, arguments)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    assert process.returncode == 0, process.stderr
    lines = [line.split("|")[-1] for line in process.stderr.splitlines() if line.startswith("import time:")]
    return {line.strip() for line in lines}


@pytest.mark.parametrize("backend", ["cpu", "auto"])
def test_a_local_search_imports_no_dask(tmp_path, backend):
    outputs = {kind: tmp_path / f"out.{kind}" for kind in TABLES}
    imported = _imported_modules(
        "search",
        "--backend",
        backend,
        "--cpu",
        "2",
        *[word for kind, path in outputs.items() for word in (f"--{kind}", path)],
        DATA / TINY["hmmfile"],
        DATA / TINY["seqfile"],
        cwd=tmp_path,
    )
    assert "gpuhmm.local" in imported and "pyhmmer" in imported  # the listing is whole
    assert not {"dask", "distributed"} & imported
    assert_golden_tables(outputs, "tiny_proteins.defaults", TINY["cases"]["defaults"])


class StampingEngine(ReferenceEngine):
    """The numpy kernels, noting their first filter launch as the GPU engine does."""

    first_launch = None

    def f1_sieve(self, groups, shard):
        if self.first_launch is None:
            self.first_launch = time.time()
        return super().f1_sieve(groups, shard)


@pytest.mark.parametrize(
    "backend, cutoff, chosen",
    [
        ("auto", 1e9, "cpu"),  # 2 threads: the GPU from 2e9 cells, and the job has about 2.5e7
        ("auto", 0.0, "gpu"),
        ("gpu", 1e9, "gpu"),
        ("cpu", 0.0, "cpu"),
    ],
)
def test_auto_takes_the_cpu_below_the_cutoff_and_the_tables_are_the_same(
    tmp_path, monkeypatch, caplog, backend, cutoff, chosen
):
    """A usable GPU stands in (the numpy kernels behind the engine's interface)."""
    monkeypatch.setattr(options, "AUTO_GPU_MIN_CELLS_PER_THREAD", cutoff)
    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", StampingEngine(90, warps=8))
    gpuhmm_log = logging.getLogger("gpuhmm")
    gpuhmm_log.addHandler(caplog.handler)  # the CLI's own handler does not propagate
    caplog.set_level(logging.INFO, logger="gpuhmm")
    summary = tmp_path / "summary.json"
    try:
        status, outputs = run_tables(
            tmp_path,
            "search",
            "--backend",
            backend,
            "--cpu",
            "2",
            "--summary",
            summary,
            DATA / TINY["hmmfile"],
            DATA / TINY["seqfile"],
        )
    finally:
        gpuhmm_log.removeHandler(caplog.handler)
    assert status == 0
    assert_golden_tables(outputs, "tiny_proteins.defaults", TINY["cases"]["defaults"])
    record = json.loads(summary.read_text())
    assert record["backend"] == chosen
    # Each record once: it may also reach the handler through the root logger.
    records = dict.fromkeys(record for record in caplog.records if record.name == "gpuhmm")
    choices = [record.getMessage() for record in records if record.getMessage().startswith("backend auto: ")]
    if backend == "auto":
        assert len(choices) == 1 and choices[0].startswith(f"backend auto: the {chosen.upper()}, for ")
        assert choices[0].endswith("cells (the GPU from 2e+09 on 2 thread(s))") == (chosen == "cpu")
    else:
        assert choices == []
    if chosen == "gpu":  # after this process started, and before now
        assert 0 < record["first_kernel_s"] <= time.time() - local.process_started()
    else:
        assert record["first_kernel_s"] is None


def test_the_process_start_is_read_from_linux():
    """Before gpuhmm was imported, the interpreter having started first (not the import's
    time, which stands in where /proc does not say)."""
    if not os.path.exists("/proc/self/stat"):
        pytest.skip("no /proc")
    before = time.time()
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(0.5); from gpuhmm import local; print(local.process_started(), local._IMPORTED)",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    started, imported = map(float, process.stdout.split())
    # /proc counts in clock ticks (10 ms).
    assert before - 0.05 <= started <= imported - 0.4


def test_a_files_size_estimates_its_residues_and_a_gzip_file_its_uncompressed_size(tmp_path):
    import gzip

    fasta = DATA / TINY["seqfile"]
    compressed = tmp_path / "proteins.faa.gz"
    compressed.write_bytes(gzip.compress(fasta.read_bytes()))
    assert placement.input_bytes(fasta) == placement.input_bytes(compressed) == fasta.stat().st_size
    assert placement.input_bytes("-") is None and placement.input_bytes(tmp_path / "absent") is None
    models = DATA / TINY["hmmfile"]
    assert (
        placement.expected_cells(models, fasta) == models.stat().st_size / placement.NODE_BYTES * fasta.stat().st_size
    )
    assert placement.expected_cells(fasta, fasta, queries_are_sequences=True) == fasta.stat().st_size ** 2
    assert placement.expected_cells(fasta, fasta, True, rounds=3) == 3 * fasta.stat().st_size ** 2


def test_a_makedb_database_named_by_its_manifest_counts_its_files(tmp_path):
    from gpuhmm.db import database

    database.makedb(DATA / TINY["seqfile"], tmp_path / "db", 2)
    whole = placement.input_bytes(tmp_path / "db")
    assert whole > (DATA / TINY["seqfile"]).stat().st_size // 2
    assert placement.input_bytes(tmp_path / "db" / "manifest.json") == whole
