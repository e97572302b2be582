"""The Snakemake workflow end to end on test shards: tables, resumption, lint, report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import DATA, GOLDEN, ROOT, TABLES, assert_tables_equal

pytestmark = pytest.mark.slow


def _snakemake(workdir, *arguments, check=True):
    environment = dict(os.environ)
    environment["PATH"] = str(Path(sys.executable).parent) + os.pathsep + environment["PATH"]
    process = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), *arguments],
        capture_output=True, text=True, env=environment,
    )
    if check and process.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(arguments)} failed:\n{process.stdout}\n{process.stderr}")
    return process


def _config(tmp_path, **hmmer):
    config = {
        "models": str(DATA / "pfam-test.h3m.gz"),
        "sequences": str(DATA / "proteins.faa"),
        "outdir": "out",
        "db_shards": 3,
        "model_shards": 2,
        "hmmer": hmmer,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("case, hmmer", [("defaults", {}), ("cut_ga", {"cut": "ga"}),
                                         ("evalue", {"E": 1.0e-5, "domE": 1.0e-3, "Z": 1000000})])
def test_workflow_tables_identical_to_hmmsearch(tmp_path, case, hmmer):
    config = _config(tmp_path, **hmmer)
    _snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    for kind in TABLES:
        assert_tables_equal(tmp_path / "out" / f"hits.{kind}", GOLDEN / f"proteins.{case}.{kind}")
    summary = yaml.safe_load((tmp_path / "out" / "summary.json").read_text())
    assert summary["sequences"] == 420
    assert [model["name"] for model in summary["models"]][:3] == ["AAA", "ABC_membrane", "ABC_tran"]
    assert (tmp_path / "out" / "summary.png").stat().st_size > 0


def test_workflow_resumes_without_redoing_finished_shards(tmp_path):
    config = _config(tmp_path)
    _snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    finished = tmp_path / "out" / "hits" / "models-0000.hits"
    stamp = finished.stat().st_mtime_ns
    # As if interrupted while the second model shard was being searched: no merged tables yet.
    for unfinished in ["hits/models-0001.hits", *[f"hits.{kind}" for kind in TABLES], "summary.json"]:
        (tmp_path / "out" / unfinished).unlink()
    plan = _snakemake(tmp_path, "--cores", "2", "--configfile", str(config), "-n", "--quiet", "rules")
    assert "search" in plan.stdout and "makedb" not in plan.stdout
    _snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    assert finished.stat().st_mtime_ns == stamp
    assert_tables_equal(tmp_path / "out" / "hits.tblout", GOLDEN / "proteins.defaults.tblout")


def test_more_model_shards_than_models(tmp_path):
    """An empty model shard is searched as nothing, and the tables stay hmmsearch's."""
    config = _config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data.update(models=str(DATA / "pfam-tiny.hmm"), model_shards=4, db_shards=2)
    config.write_text(yaml.safe_dump(data))
    _snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    for kind in TABLES:
        assert_tables_equal(tmp_path / "out" / f"hits.{kind}", GOLDEN / f"tiny_proteins.defaults.{kind}")


def test_workflow_refuses_bad_config(tmp_path):
    config = _config(tmp_path, cut="ga", E=1.0)
    process = _snakemake(tmp_path, "--cores", "1", "--configfile", str(config), "-n", check=False)
    assert process.returncode != 0
    assert "--cut_ga cannot be combined with -E" in process.stdout + process.stderr


def test_workflow_failed_search_leaves_no_tables(tmp_path):
    bad = tmp_path / "bad.faa"
    bad.write_text(">x\nMKV1\n")
    config = _config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["sequences"] = str(bad)
    config.write_text(yaml.safe_dump(data))
    process = _snakemake(tmp_path, "--cores", "2", "--configfile", str(config), check=False)
    assert process.returncode != 0
    assert "illegal character 1" in (tmp_path / "out" / "logs" / "makedb.log").read_text()
    assert not list((tmp_path / "out").glob("hits.*"))


def test_lint_is_clean(tmp_path):
    process = _snakemake(ROOT, "--lint")
    assert "good condition" in process.stdout + process.stderr


def test_report_has_table_and_plot(tmp_path):
    config = _config(tmp_path)
    _snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    _snakemake(tmp_path, "--configfile", str(config), "--report", str(tmp_path / "report.html"))
    html = (tmp_path / "report.html").read_text(errors="replace")
    assert "summary.tsv" in html and "summary.png" in html


def test_slurm_profile_dry_runs(tmp_path):
    """The SLURM profile plans every job and asks a GPU for each search (conda left out here)."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    config = _config(tmp_path)
    plan = _snakemake(tmp_path, "--workflow-profile", str(ROOT / "profiles" / "slurm"), "--configfile", str(config),
                      "--sdm", "env-modules", "-n").stdout
    searches = [line for line in plan.splitlines() if "engine=--backend" in line]
    assert len(searches) == 2
    assert all("gpu=1" in line and "gpu_model=h100" in line and "cpus_per_task=16" in line for line in searches)
