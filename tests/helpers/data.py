"""The bundled test data, HMMER 3.4's golden outputs and binaries, and how outputs are compared
with them."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from .binaries import find_binary

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "golden"
ROOT = Path(__file__).resolve().parents[2]
TABLES = ("tblout", "domtblout", "pfamtblout")


def hmmer_binary(name):
    """A binary of the `hmmer` 3.4 wheel (the reference), else one on PATH, else skip."""
    found = find_binary(name)
    if found is None:
        pytest.skip(f"{name} (PyPI package hmmer==3.4.0.2) is not installed")
    return found


def binary_models(hmms, directory):
    """`hmms`, in their order, as one binary HMM file in `directory` (for the binaries): its path."""
    path = Path(directory) / "models.h3m"
    with path.open("wb") as handle:
        for hmm in hmms:
            hmm.write(handle, binary=True)
    return path


def table_body(path):
    """A table without its closing footer (program, options, directory, date): all rows and headers."""
    lines = Path(path).read_text().splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.startswith("# Program:"):
            return "".join(lines[: index - 1])
    raise AssertionError(f"{path}: no HMMER footer")


def golden_cases():
    return json.loads((GOLDEN / "cases.json").read_text())


def assert_tables_equal(produced, expected):
    """Byte-identical rows and headers; only the footer (who, when, where) may differ."""
    assert table_body(produced) == table_body(expected), f"{produced} differs from {expected}"


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


@functools.cache
def pfam_test_data():
    """The test Pfam models and the test proteins (pyhmmer digital sequences), read once."""
    import pyhmmer

    alphabet = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        hmms = list(handle)
    with pyhmmer.easel.SequenceFile(str(DATA / "proteins.faa"), digital=True, alphabet=alphabet) as handle:
        sequences = list(handle.read_block())
    return hmms, sequences
