"""Shared test helpers: the bundled data, the reference hmmsearch, table comparison."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hmmer_binaries import find_binary

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden"
ROOT = Path(__file__).parent.parent


def hmmer_binary(name):
    """A binary of the `hmmer` 3.4 wheel (the reference), else one on PATH, else skip."""
    found = find_binary(name)
    if found is None:
        pytest.skip(f"{name} (PyPI package hmmer==3.4.0.2) is not installed")
    return found


def table_body(path):
    """A table without its closing footer (program, options, directory, date): all rows and headers."""
    lines = Path(path).read_text().splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.startswith("# Program:"):
            return "".join(lines[: index - 1])
    raise AssertionError(f"{path}: no HMMER footer")


def golden_cases():
    return json.loads((GOLDEN / "cases.json").read_text())


def golden_runs():
    return json.loads((GOLDEN / "runs.json").read_text())


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


def assert_tables_equal(produced, expected):
    """Byte-identical rows and headers; only the footer (who, when, where) may differ."""
    assert table_body(produced) == table_body(expected), f"{produced} differs from {expected}"


TABLES = ("tblout", "domtblout", "pfamtblout")


def _gpu_present():
    try:
        from gpuhmm.engine import gpu
    except Exception:  # no CuPy, or CuPy without a CUDA driver
        return False
    return gpu.device_count() > 0


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if "gpu" in item.keywords]
    if marked and not _gpu_present():
        skip = pytest.mark.skip(reason="needs a CUDA GPU and CuPy")
        for item in marked:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pfam_test_data():
    """The test Pfam models and the test proteins (pyhmmer digital sequences)."""
    import pyhmmer

    alphabet = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        hmms = list(handle)
    with pyhmmer.easel.SequenceFile(str(DATA / "proteins.faa"), digital=True, alphabet=alphabet) as handle:
        sequences = list(handle.read_block())
    return hmms, sequences


def msv_filter_scores(hmm, sequences):
    """pyhmmer's `OptimizedProfile.msv_filter` (HMMER's p7_MSVFilter) per sequence; NaN if empty."""
    import numpy as np
    import pyhmmer

    background = pyhmmer.plan7.Background(hmm.alphabet)
    profile = pyhmmer.plan7.Profile(hmm.M, hmm.alphabet)
    profile.configure(hmm, background, L=400)
    optimized = profile.to_optimized()
    scores = np.full(len(sequences), np.nan, dtype=np.float32)
    undecided = np.zeros(len(sequences), dtype=bool)
    for index, sequence in enumerate(sequences):
        if len(sequence):
            optimized.L = len(sequence)
            scores[index] = optimized.msv_filter(sequence)
            ssv = optimized.ssv_filter(sequence)
            undecided[index] = ssv is None or ssv != ssv
    return scores, undecided


def filter_shard(sequences):
    """A filter shard of pyhmmer digital sequences, in the given order."""
    from gpuhmm.engine.filters import FilterShard

    return FilterShard.from_digital(sequences)


def filter_profiles(hmms, background):
    """Per model, the Viterbi-filter and Forward-filter parameters the GPU stages read."""
    from gpuhmm.stages import fwdfilter, vitfilter

    written = vitfilter.configured(hmms, background)
    return (
        vitfilter.viterbi_profiles(hmms, background, written),
        [fwdfilter.ForwardProfile.from_h3p(data, hmm) for hmm, (_, data) in zip(hmms, written)],
    )


def header_block(text):
    """A report's lines up to its second rule and the blank line after it."""
    lines = text.splitlines(keepends=True)
    rules = [index for index, line in enumerate(lines) if line.startswith("# - - - -")]
    assert len(rules) == 2 and lines[rules[1] + 1] == "\n", "no header block"
    return lines[: rules[1] + 2]


def without_timing(text):
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(("# CPU time:", "# Mc/sec:")))


def report_body(text):
    """A report without its header block and its timing lines."""
    return without_timing("".join(text.splitlines(keepends=True)[len(header_block(text)) :]))
