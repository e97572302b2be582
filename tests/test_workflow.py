"""The Snakemake workflow end to end on test shards: tables, resumption, lint, report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import formats
from helpers.data import DATA, GOLDEN, ROOT, TABLES, assert_tables_equal, hmmer_binary

pytestmark = pytest.mark.slow


def _snakemake(workdir, *arguments, check=True, tools=None):
    environment = dict(os.environ)
    environment["PATH"] = os.pathsep.join(
        [*([str(tools)] if tools else []), str(Path(sys.executable).parent), environment["PATH"]]
    )
    process = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory", str(workdir), *arguments],
        capture_output=True,
        text=True,
        env=environment,
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


@pytest.mark.parametrize(
    "case, hmmer",
    [("defaults", {}), ("cut_ga", {"cut": "ga"}), ("evalue", {"E": 1.0e-5, "domE": 1.0e-3, "Z": 1000000})],
)
def test_workflow_tables_identical_to_hmmsearch(tmp_path, case, hmmer):
    config = _config(tmp_path, **hmmer)
    _snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    for kind in TABLES:
        assert_tables_equal(tmp_path / "out" / f"hits.{kind}", GOLDEN / f"proteins.{case}.{kind}")
    summary = yaml.safe_load((tmp_path / "out" / "summary.json").read_text())
    assert summary["sequences"] == 420
    assert [model["name"] for model in summary["models"]][:3] == ["AAA", "ABC_membrane", "ABC_tran"]
    assert (tmp_path / "out" / "summary.png").stat().st_size > 0


@pytest.mark.parametrize("backend", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_workflow_resumes_without_redoing_finished_shards(tmp_path, request, backend):
    """On the GPU backend, on two GPUs: each search is a dask-cuda worker per GPU."""
    if backend == "gpu":
        request.getfixturevalue("two_gpus")
    config = _config(tmp_path)
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "backend": backend}))
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


def test_workflow_reads_sequences_in_another_format(tmp_path):
    """An EMBL file is read as hmmsearch reads it, its accessions kept through the database."""
    embl = formats.write(formats.records(DATA / "proteins.faa")[:150], tmp_path / "proteins.embl", "embl")
    config = _config(tmp_path)
    config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "sequences": str(embl)}))
    _snakemake(tmp_path, "--cores", "2", "--configfile", str(config))
    theirs = [word for kind in TABLES for word in (f"--{kind}", tmp_path / f"theirs.{kind}")]
    command = [hmmer_binary("hmmsearch"), "--cpu", "1", "-o", os.devnull, *theirs, DATA / "pfam-test.h3m.gz", embl]
    subprocess.run(command, check=True, capture_output=True)
    for kind in TABLES:
        assert_tables_equal(tmp_path / "out" / f"hits.{kind}", tmp_path / f"theirs.{kind}")


def test_workflow_refuses_bad_config(tmp_path):
    config = _config(tmp_path, cut="ga", E=1.0)
    process = _snakemake(tmp_path, "--cores", "1", "--configfile", str(config), "-n", check=False)
    assert process.returncode != 0
    assert "--cut_ga cannot be combined with -E" in process.stdout + process.stderr


@pytest.mark.parametrize("key, block", [("bogus", None), ("evalue", "hmmer")])
def test_an_unknown_config_key_is_one_line_naming_it(tmp_path, key, block):
    config = _config(tmp_path)
    data = yaml.safe_load(config.read_text())
    (data[block] if block else data)[key] = 1
    config.write_text(yaml.safe_dump(data))
    process = _snakemake(tmp_path, "--cores", "1", "--configfile", str(config), "-n", check=False)
    assert process.returncode != 0
    where = f"config.{block}" if block else "config"
    lines = [line for line in (process.stdout + process.stderr).splitlines() if "unknown key" in line]
    assert lines == [f"{where}: unknown key(s) '{key}'; allowed: " + lines[0].split("allowed: ")[1]]
    assert ("models, outdir" if block is None else "E, F1, F2") in lines[0]
    assert "$schema" not in process.stdout + process.stderr


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
    """The SLURM profile plans every job, without conda, and asks a GPU for each search, whose
    --cpu is its cpus_per_task."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    config = _config(tmp_path)
    plan = _snakemake(
        tmp_path, "--workflow-profile", str(ROOT / "profiles" / "slurm"), "--configfile", str(config), "-n", "-p"
    ).stdout
    searches = [line for line in plan.splitlines() if "engine=--backend" in line]
    assert len(searches) == 2
    assert all("gpu=1" in line and "gpu_model=h100" in line and "cpus_per_task=16" in line for line in searches)
    commands = [line for line in plan.splitlines() if "gpuhmm search" in line]
    assert len(commands) == 2 and all(" --cpu 16 " in line for line in commands)


#: Stand-ins for SLURM's commands: sbatch records its arguments, runs the job script here and
#: prints a job id; sacct and squeue report the jobs run so far; sinfo names one default
#: partition; srun runs the job step's command. So the executor plugin drives a real run.
FAKE_SLURM = {
    "sbatch": """
import fcntl, subprocess, sys
from pathlib import Path
here = Path(__file__).parent
script = sys.stdin.read()
with open(here / "lock", "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    with open(here / "submissions.txt", "a") as log:
        log.write(" ".join(sys.argv[1:]) + "\\n")
    job = sum(1 for _ in open(here / "submissions.txt"))
    fcntl.flock(lock, fcntl.LOCK_UN)
state = "COMPLETED" if subprocess.run(["bash", "-c", script], capture_output=True).returncode == 0 else "FAILED"
with open(here / "lock", "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    with open(here / "states.txt", "a") as log:
        log.write(f"{job}|{state}\\n")
print(job)
""",
    "sacct": """
from pathlib import Path
states = Path(__file__).parent / "states.txt"
print(states.read_text() if states.exists() else "", end="")
""",
    "sinfo": """
print("PARTITION\\ngpu*")
""",
    "srun": """
import os, sys
arguments = sys.argv[1:]
while arguments and arguments[0].startswith("-"):
    arguments.pop(0)
os.execvp(arguments[0], arguments)
""",
}


def test_slurm_profile_submits_gpu_searches_and_runs_through(tmp_path):
    """Through the SLURM executor plugin, with stand-ins for SLURM's commands: the sbatch calls
    it makes (a GPU and 16 CPUs for each search job) and the tables of the run."""
    pytest.importorskip("snakemake_executor_plugin_slurm")
    tools = tmp_path / "bin"
    tools.mkdir()
    for name, code in {**FAKE_SLURM, "squeue": FAKE_SLURM["sacct"]}.items():
        (tools / name).write_text(f"#!{sys.executable}{code}")
        (tools / name).chmod(0o755)
    config = _config(tmp_path)
    _snakemake(
        tmp_path,
        "--workflow-profile",
        str(ROOT / "profiles" / "slurm"),
        "--configfile",
        str(config),
        "--sdm",
        "env-modules",
        "--slurm-pass-command-as-script",
        "--slurm-init-seconds-before-status-checks",
        "1",
        tools=tools,
    )
    submissions = (tools / "submissions.txt").read_text().splitlines()
    searches = [line for line in submissions if "--comment rule_search" in line]
    others = [line for line in submissions if "--comment rule_search" not in line]
    assert len(searches) == 2 and len(others) == 3
    assert all(
        "--gpus=h100:1" in line and "--cpus-per-task=16" in line and "--mem 64000" in line and "-t 240" in line
        for line in searches
    )
    assert not any("--gpus" in line for line in others)
    for kind in TABLES:
        assert_tables_equal(tmp_path / "out" / f"hits.{kind}", GOLDEN / f"proteins.defaults.{kind}")


def test_a_host_workflow_uses_gpuhmm_as_a_module(tmp_path):
    host = ROOT / "tests" / "module_host"
    (tmp_path / "Snakefile").write_text((host / "Snakefile").read_text())
    config = yaml.safe_load((host / "config.yaml").read_text())
    config["gpuhmm"].update(models=str(DATA / "pfam-test.h3m.gz"), sequences=str(DATA / "proteins.faa"))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            "2",
            "--directory",
            str(tmp_path),
            "-s",
            str(tmp_path / "Snakefile"),
        ],
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "GPUHMM_SNAKEFILE": str(ROOT / "Snakefile"),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        },
    )
    assert process.returncode == 0, process.stderr[-3000:]
    assert "localrules directive specifies rules that are not present" not in process.stderr
    for kind in TABLES:
        assert_tables_equal(tmp_path / "gpuhmm" / f"hits.{kind}", GOLDEN / f"proteins.defaults.{kind}")
    rows = [line for line in (GOLDEN / "proteins.defaults.tblout").read_text().splitlines() if not line.startswith("#")]
    assert int((tmp_path / "annotated.count").read_text()) == len(rows)


def test_workflow_scan_mode_gives_hmmscans_tables(tmp_path):
    config = yaml.safe_load(_config(tmp_path).read_text())
    config.update(mode="scan", sequences=str(DATA / "heldout.faa"), hmmer={"cut": "ga"})
    path = tmp_path / "scan.yaml"
    path.write_text(yaml.safe_dump(config))
    _snakemake(tmp_path, "--cores", "2", "--configfile", str(path))
    for kind in TABLES:
        assert_tables_equal(tmp_path / "out" / f"scan.{kind}", GOLDEN / f"scan_heldout.cut_ga.{kind}")
    assert not (tmp_path / "out" / "hits").exists()  # no model-shard searches in scan mode
