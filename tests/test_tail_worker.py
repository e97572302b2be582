"""The GPU backend's path through the stages after the Forward filter (worker/tail.py), without a
GPU: the numpy model of the filter kernels, and the tail's kernels built for the host, stand in
for the device. The tables equal hmmsearch's goldens, also when the kernel hands pairs back to
pyhmmer, and the summary counts the pairs each side finished."""

from __future__ import annotations

import json
import subprocess

import pytest

from helpers.cli import golden_runs, run_golden, run_gpuhmm, run_tables
from helpers.data import DATA, GOLDEN, assert_tables_equal, hmmer_binary, report_body
from helpers.tail import HostTailEngine, install_host_tail

GPU_DOMAINS = ("--domaindef", "gpu")
ENGINE = ("--backend", "gpu", "--cpu", 2, "--db-shards", 3, "--model-shards", 2)
RUNS = golden_runs()


@pytest.fixture
def host_tail(monkeypatch):
    """The host build as the GPU, with no latency: the tail queue gives it pairs of these small
    jobs too."""

    def install(refuse=0):
        return install_host_tail(monkeypatch, HostTailEngine(refuse))

    return install


@pytest.mark.parametrize("case", list(RUNS["heldout"]["cases"]))
def test_tables_identical_to_hmmsearch(tmp_path, host_tail, case):
    """Every third pair of a call handed back: the GPU's hits and pyhmmer's join."""
    engine = host_tail(refuse=3)
    run_golden(tmp_path, "search", "heldout", case, *ENGINE, *GPU_DOMAINS)
    assert engine.pairs > 0


def test_the_gpu_tail_is_the_default(tmp_path, host_tail):
    engine = host_tail()
    run_golden(tmp_path, "search", "heldout", "defaults", *ENGINE)
    assert engine.pairs > 0


def test_pyhmmer_finishes_every_pair_with_domaindef_cpu(tmp_path, host_tail):
    engine = host_tail()
    run_golden(tmp_path, "search", "heldout", "defaults", *ENGINE, "--domaindef", "cpu")
    assert engine.pairs == 0


@pytest.mark.parametrize("backend", ["cpu", "auto"])
def test_domaindef_gpu_on_the_cpu_backend_says_so_in_one_line(tmp_path, backend):
    """The CPU backend has no GPU stages: the tables are the CPU's, and one line says so."""
    inputs = [DATA / RUNS["tiny_proteins"][key] for key in ("hmmfile", "seqfile")]
    tables = tmp_path / "out.tblout"
    process = run_gpuhmm("search", "--backend", backend, *GPU_DOMAINS, "--tblout", tables, *inputs)
    assert_tables_equal(tables, GOLDEN / "tiny_proteins.defaults.tblout")
    notes = [line.split(" gpuhmm: ", 1)[1] for line in process.stderr.splitlines() if "domaindef" in line]
    assert notes == ["--domaindef gpu: on the CPU backend, pyhmmer defines the domains, as with --domaindef cpu"]


def test_summary_counts_the_pairs(tmp_path, host_tail):
    host_tail(refuse=2)
    summary = tmp_path / "summary.json"
    run_golden(tmp_path, "search", "heldout", "defaults", "--backend", "gpu", *GPU_DOMAINS, "--summary", summary)
    stages = json.loads(summary.read_text())["gpu_stages"]
    assert stages["pairs_finished_on_gpu"] > 0 and stages["pairs_to_pyhmmer"] > 0


def test_report_identical_to_hmmsearch(tmp_path, host_tail):
    """The `-o` report of a multi-model search: each query's statistics count its one model."""
    engine = host_tail()
    inputs = [DATA / RUNS["heldout"][key] for key in ("hmmfile", "seqfile")]
    ours, theirs = tmp_path / "gpuhmm.out", tmp_path / "hmmsearch.out"
    assert run_tables(tmp_path, "search", *ENGINE, *GPU_DOMAINS, "-o", ours, *inputs)[0] == 0
    subprocess.run([hmmer_binary("hmmsearch"), "--cpu", "1", "-o", theirs, *inputs], check=True)
    assert engine.pairs > 0
    assert report_body(ours.read_text()) == report_body(theirs.read_text())
