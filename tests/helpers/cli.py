"""gpuhmm's command line as a user runs it (a fresh interpreter) and as the tests run it (in
this process, every table to a scratch folder)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys

from gpuhmm.cli import main

from .data import DATA, GOLDEN, ROOT, TABLES, assert_tables_equal, golden_cases

#: Each command's golden runs: inputs, and the tables stored per option case (cases.json).
RUN_FILES = {"search": "runs.json", "phmmer": "phmmer-runs.json", "scan": "scan-runs.json"}


def run_gpuhmm(*arguments, check=True, cwd=None):
    """The installed CLI in a fresh interpreter, as a user runs it."""
    process = subprocess.run(
        [sys.executable, "-m", "gpuhmm", *map(str, arguments)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )
    if check and process.returncode != 0:
        raise AssertionError(f"gpuhmm {' '.join(map(str, arguments))} failed ({process.returncode}):\n{process.stderr}")
    return process


def run_tables(tmp_path, command, *arguments, tables=TABLES):
    """`gpuhmm COMMAND ARGUMENTS...` in this process, each of `tables` written to
    tmp_path/out.KIND: (exit status, {kind: path})."""
    outputs = {kind: tmp_path / f"out.{kind}" for kind in tables}
    words = [word for kind, path in outputs.items() for word in (f"--{kind}", str(path))]
    status = main([command, *words, *map(str, arguments)])
    return status, outputs


def assert_golden_tables(outputs, prefix, kinds):
    """Each table of `kinds` equals the golden GOLDEN/PREFIX.KIND; at least one is compared."""
    assert kinds
    for kind in kinds:
        assert_tables_equal(outputs[kind], GOLDEN / f"{prefix}.{kind}")


def golden_runs(command="search"):
    """The golden runs of `command`, by name."""
    return json.loads((GOLDEN / RUN_FILES[command]).read_text())


def run_golden(tmp_path, command, run, case, *options):
    """`gpuhmm COMMAND` on golden run `run` with option case `case` and `options`: its tables,
    asserted equal to every golden stored for that run and case."""
    spec = golden_runs(command)[run]
    inputs = [DATA / spec[key] for key in ("hmmfile", "queryfile") if key in spec] + [DATA / spec["seqfile"]]
    status, outputs = run_tables(tmp_path, command, *golden_cases()[case], *options, *inputs)
    assert status == 0
    assert_golden_tables(outputs, f"{run}.{case}", spec["cases"][case])
    return outputs


def golden_searches():
    """(command, run, case) of every golden search and phmmer case."""
    return [(command, run, case) for command in ("search", "phmmer") for run, spec in golden_runs(command).items()
            for case in spec["cases"]]  # fmt: skip


@contextlib.contextmanager
def gpuhmm_log(caplog):
    """`caplog`, hearing the gpuhmm logger's INFO lines (the CLI's own handler does not propagate)."""
    logger = logging.getLogger("gpuhmm")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="gpuhmm")
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def streamed_parts(caplog):
    """The parts (blocks, or the shards of pieces) that the one streamed search `caplog` heard read."""
    found = {record.getMessage() for record in caplog.records if "streamed in" in record.getMessage()}
    assert len(found) == 1, "the search did not stream once"
    return int(found.pop().split("streamed in ")[1].split()[0])
