"""`gpuhmm scan` against hmmscan 3.4's golden tables (models hmmpress'ed for hmmscan): the
models × shards engine, regrouped by sequence. heldout.faa, the query set, was never used for
tuning."""

from __future__ import annotations

import json

import pytest

from gpuhmm import search
from gpuhmm.cli import main
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.worker import STATE

from conftest import DATA, GOLDEN, TABLES, assert_tables_equal, golden_cases

CASES = golden_cases()
RUNS = json.loads((GOLDEN / "scan-runs.json").read_text())
RUN = "scan_heldout"


def _scan(tmp_path, case, backend="cpu", db_shards=3, cpus=2):
    outputs = {kind: tmp_path / f"out.{kind}" for kind in TABLES}
    status = main(
        [
            "scan",
            "--backend",
            backend,
            "--cpu",
            str(cpus),
            "--db-shards",
            str(db_shards),
            *[word for kind, path in outputs.items() for word in (f"--{kind}", str(path))],
            "--domains",
            str(tmp_path / "domains.tsv"),
            *CASES[case],
            str(DATA / RUNS[RUN]["hmmfile"]),
            str(DATA / RUNS[RUN]["seqfile"]),
        ]
    )
    assert status == 0
    for kind in RUNS[RUN]["cases"][case]:
        assert_tables_equal(outputs[kind], GOLDEN / f"{RUN}.{case}.{kind}")
    return tmp_path / "domains.tsv"


@pytest.mark.parametrize("case", list(RUNS[RUN]["cases"]))
@pytest.mark.parametrize("db_shards,cpus", [(1, 1), (3, 2)])
def test_scan_identical_to_hmmscan(tmp_path, case, db_shards, cpus):
    _scan(tmp_path, case, db_shards=db_shards, cpus=cpus)


def test_scan_on_the_gpu_path_with_reference_engine(tmp_path, monkeypatch):
    """The GPU filters (their numpy model) choose each sequence's models; the rows stay hmmscan's."""
    monkeypatch.setattr(search, "gpu_problem", lambda: None)
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
