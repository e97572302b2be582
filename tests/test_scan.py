"""`gpuhmm scan` against hmmscan 3.4's golden tables (models hmmpress'ed for hmmscan): the
models × shards engine, regrouped by sequence. heldout.faa, the query set, was never used for
tuning."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gpuhmm import placement
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.worker import STATE

from helpers.cli import golden_runs, run_golden, run_tables
from helpers.data import DATA, GOLDEN, TABLES, hmmer_binary, table_body

RUNS = golden_runs("scan")
RUN = "scan_heldout"


def _scan(tmp_path, case, backend="cpu", db_shards=3, cpus=2):
    """hmmscan's golden run under option case `case`, and the domains table it wrote."""
    domains = tmp_path / "domains.tsv"
    options = ("--backend", backend, "--cpu", cpus, "--db-shards", db_shards, "--domains", domains)
    run_golden(tmp_path, "scan", RUN, case, *options)
    return domains


@pytest.mark.parametrize("case", list(RUNS[RUN]["cases"]))
@pytest.mark.parametrize("db_shards,cpus", [(1, 1), (3, 2)])
def test_scan_identical_to_hmmscan(tmp_path, case, db_shards, cpus):
    _scan(tmp_path, case, db_shards=db_shards, cpus=cpus)


def test_scan_on_the_gpu_path_with_reference_engine(tmp_path, monkeypatch):
    """The GPU filters (their numpy model) choose each sequence's models; the rows stay hmmscan's."""
    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))
    _scan(tmp_path, "cut_ga", backend="gpu")


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(RUNS[RUN]["cases"]))
def test_scan_on_the_gpu(tmp_path, case):
    _scan(tmp_path, case, backend="gpu")


def test_scan_domain_table_lists_each_reported_domain_per_sequence(tmp_path):
    domains = _scan(tmp_path, "cut_ga").read_text().splitlines()
    header, rows = domains[0].split("\t"), [line.split("\t") for line in domains[1:]]
    expected = [
        line.split()
        for line in (GOLDEN / f"{RUN}.cut_ga.domtblout").read_text().splitlines()
        if not line.startswith("#")
    ]
    # domtblout (hmmscan): target = model, query = sequence; ali from/to are columns 17 and 18.
    assert sorted(
        (row[header.index("seq_id")], row[header.index("hmm_name")], int(row[header.index("ali_start")]))
        for row in rows
    ) == sorted((fields[3], fields[0], int(fields[17])) for fields in expected)


def test_scan_table_footers_are_hmmscans(tmp_path, monkeypatch):
    """hmmscan's footers name the sequence file as the query file and the models as the target;
    its pfamtblout says SEARCH where its other tables say SCAN. Only the lines naming the
    program, its version and command line, and the date, are gpuhmm's own."""
    shutil.copy(DATA / "pfam-tiny.hmm", tmp_path / "tiny.hmm")
    shutil.copy(DATA / "heldout.faa", tmp_path / "queries.faa")
    monkeypatch.chdir(tmp_path)
    subprocess.run([hmmer_binary("hmmpress"), "tiny.hmm"], check=True, capture_output=True)
    tables = [word for kind in TABLES for word in (f"--{kind}", f"hmmscan.{kind}")]
    subprocess.run([hmmer_binary("hmmscan"), "-o", "/dev/null", *tables, "tiny.hmm", "queries.faa"], check=True)
    status, outputs = run_tables(tmp_path, "scan", "--backend", "cpu", "-o", "/dev/null", "tiny.hmm", "queries.faa")
    assert status == 0

    def footer(path):
        text = path.read_text()
        own = ("# Program:", "# Version:", "# Option settings:", "# Date:")
        return [line for line in text[len(table_body(path)) :].splitlines() if not line.startswith(own)]

    for kind in TABLES:
        assert footer(outputs[kind]) == footer(tmp_path / f"hmmscan.{kind}"), kind
