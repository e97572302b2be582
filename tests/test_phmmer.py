"""`gpuhmm phmmer` against phmmer 3.4's golden tables: single-sequence models built as phmmer
builds them, searched by the sharded engine. The queries are real proteins of heldout.faa,
which no test was tuned on."""

from __future__ import annotations

import subprocess

import pytest

from gpuhmm import placement
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.worker import STATE

from helpers.cli import golden_runs, run_golden, run_gpuhmm
from helpers.data import DATA, hmmer_binary, table_body

RUNS = golden_runs("phmmer")


def _phmmer(tmp_path, run, case, backend="cpu", db_shards=3):
    run_golden(tmp_path, "phmmer", run, case, "--backend", backend, "--cpu", 2, "--db-shards", db_shards)


@pytest.mark.parametrize("run,case", [(run, case) for run in RUNS for case in RUNS[run]["cases"]])
def test_phmmer_identical_to_phmmer(tmp_path, run, case):
    _phmmer(tmp_path, run, case)


def test_phmmer_on_the_gpu_path_with_reference_engine(tmp_path, monkeypatch):
    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))
    _phmmer(tmp_path, "phmmer_heldout", "defaults", backend="gpu", db_shards=2)


@pytest.mark.gpu
def test_phmmer_on_the_gpu(tmp_path):
    _phmmer(tmp_path, "phmmer", "defaults", backend="gpu")


def test_an_empty_first_query_leaves_the_tables_without_their_header(tmp_path):
    """phmmer counts an empty first query as the first, then skips it: no table opens with the
    column header (its nquery == 1 test)."""
    phmmer = hmmer_binary("phmmer")
    queries = tmp_path / "queries.faa"
    queries.write_bytes(b">empty\n" + (DATA / "jackhmmer-short.faa").read_bytes())
    tables = ("--tblout", "t.tbl", "--domtblout", "d.tbl")
    run_gpuhmm("phmmer", "-o", "/dev/null", *tables, "--backend", "cpu", queries, DATA / "proteins.faa", cwd=tmp_path)
    theirs = [name.replace(".tbl", ".ref") if name.endswith(".tbl") else name for name in tables]
    subprocess.run([phmmer, "-o", "/dev/null", *theirs, queries, DATA / "proteins.faa"], cwd=tmp_path, check=True)
    for ours in ("t", "d"):
        assert table_body(tmp_path / f"{ours}.tbl") == table_body(tmp_path / f"{ours}.ref")
        assert "# target name" not in (tmp_path / f"{ours}.tbl").read_text()
