"""Bad input: one clear line naming the file and the problem, a non-zero exit, no tables."""

from __future__ import annotations

import gzip
import random

import pytest

from helpers.cli import run_gpuhmm
from helpers.data import DATA, TABLES

MODELS = DATA / "pfam-test.h3m.gz"
TINY = DATA / "pfam-tiny.hmm"
PROTEINS = DATA / "proteins.faa"
#: Python's gzip reader's word for a stream cut short.
GZIP_ENDED = "Compressed file ended before the end-of-stream marker was reached"


def _write(path, content):
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def _protein(length, seed=1):
    generator = random.Random(seed)
    return "".join(generator.choice("ACDEFGHIKLMNPQRSTVWY") for _ in range(length))


def _assert_refused(tmp_path, arguments, *expected_words):
    outputs = [tmp_path / f"out.{kind}" for kind in TABLES]
    flags = [word for kind, path in zip(TABLES, outputs) for word in (f"--{kind}", path)]
    process = run_gpuhmm("search", *flags, *arguments, check=False, cwd=tmp_path)
    assert process.returncode != 0
    lines = process.stderr.strip().splitlines()
    errors = [line for line in lines if "error" in line]
    assert len(errors) == 1, process.stderr
    assert "Traceback" not in process.stderr
    for word in expected_words:
        assert word in errors[0], errors[0]
    assert not any(path.exists() for path in outputs), "a table was left behind"
    assert not list(tmp_path.glob(".out.*")), "a temporary table was left behind"
    return errors[0]


def test_missing_model_file(tmp_path):
    _assert_refused(tmp_path, [tmp_path / "nope.hmm", PROTEINS], "nope.hmm", "not found")


def test_empty_model_file(tmp_path):
    _assert_refused(tmp_path, [_write(tmp_path / "empty.hmm", ""), PROTEINS], "empty.hmm", "empty")


def test_non_hmm_model_file(tmp_path):
    _assert_refused(tmp_path, [PROTEINS, PROTEINS], "proteins.faa", "not an HMMER model file")


def test_truncated_text_model_file(tmp_path):
    truncated = _write(tmp_path / "cut.hmm", TINY.read_bytes()[:30000])
    _assert_refused(tmp_path, [truncated, PROTEINS], "cut.hmm", "truncated")


def test_truncated_binary_model_file(tmp_path):
    binary = gzip.decompress(MODELS.read_bytes())
    truncated = _write(tmp_path / "cut.h3m", binary[: len(binary) // 2])
    _assert_refused(tmp_path, [truncated, PROTEINS], "cut.h3m", "truncated")


def test_truncated_gzip_model_file(tmp_path):
    truncated = _write(tmp_path / "cut.h3m.gz", MODELS.read_bytes()[:50000])
    _assert_refused(tmp_path, [truncated, PROTEINS], "cut.h3m.gz", "truncated or damaged gzip file")


@pytest.mark.parametrize("command", ["phmmer", "jackhmmer"])
@pytest.mark.parametrize("kept_bytes", [20, 1000])
def test_truncated_gzip_query_file(tmp_path, command, kept_bytes):
    """phmmer's and jackhmmer's queries: one line naming the file, exit 1, no output."""
    queries = gzip.compress((DATA / "phmmer-queries.faa").read_bytes(), mtime=0)
    truncated = _write(tmp_path / "cut.faa.gz", queries[:kept_bytes])
    outputs = ["-o", "out.txt", "--tblout", "out.tbl"]
    process = run_gpuhmm(command, *outputs, truncated, PROTEINS, check=False, cwd=tmp_path)
    assert process.returncode == 1 and "Traceback" not in process.stderr
    errors = [line for line in process.stderr.splitlines() if "error" in line]
    assert errors == [f"gpuhmm {command}: error: {truncated}: truncated or damaged gzip file ({GZIP_ENDED})"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cut.faa.gz"]


def test_missing_sequence_file(tmp_path):
    _assert_refused(tmp_path, [TINY, tmp_path / "nope.faa"], "nope.faa", "not found")


def test_empty_sequence_file(tmp_path):
    _assert_refused(tmp_path, [TINY, _write(tmp_path / "empty.faa", "")], "empty.faa", "empty")


def test_garbage_sequence_file(tmp_path):
    _assert_refused(tmp_path, [TINY, _write(tmp_path / "junk.faa", "this is not FASTA\n")], "junk.faa", "FASTA")


def test_binary_garbage_sequence_file(tmp_path):
    _assert_refused(tmp_path, [TINY, _write(tmp_path / "junk.bin", bytes(range(256)) * 4)], "junk.bin")


def test_illegal_residue(tmp_path):
    bad = _write(tmp_path / "bad.faa", ">ok\nMKVLA\n>bad\nMKV1LA\n")
    _assert_refused(tmp_path, [TINY, bad], "bad.faa", "illegal character 1")


@pytest.mark.parametrize("kept_bytes", [20000, 20001, 40000, 65537])
def test_truncated_gzip_sequence_file(tmp_path, kept_bytes):
    truncated = _write(tmp_path / "cut.faa.gz", gzip.compress(PROTEINS.read_bytes(), mtime=0)[:kept_bytes])
    _assert_refused(tmp_path, [TINY, truncated], "cut.faa.gz", "gzip")


def test_alphabet_mismatch(tmp_path):
    """A database built as nucleotides does not meet protein models (a FASTA file is read in the
    models' alphabet, as hmmsearch reads it)."""
    dna = _write(tmp_path / "dna.faa", ">chr\n" + "ACGTTGCAAGCT" * 50 + "\n")
    run_gpuhmm("makedb", dna, tmp_path / "dna-db", "--alphabet", "dna")
    _assert_refused(tmp_path, [TINY, tmp_path / "dna-db"], "dna-db", "alphabet mismatch")


def test_sequence_over_hmmer_limit(tmp_path):
    """hmmsearch aborts on a target over 100,000 residues and writes no rows; so do we."""
    long = _write(tmp_path / "long.faa", f">fine\n{_protein(100)}\n>huge\n{_protein(100_001)}\n")
    _assert_refused(tmp_path, [TINY, long], "long.faa", "huge", "100,000")


def test_sequence_at_hmmer_limit_is_searched(tmp_path):
    """Exactly 100,000 residues is within HMMER's limit."""
    edge = _write(tmp_path / "edge.faa", f">edge\n{_protein(100_000)}\n")
    run_gpuhmm("search", "--tblout", tmp_path / "t", TINY, edge)
    assert (tmp_path / "t").exists()


@pytest.mark.parametrize(
    "arguments, words",
    [
        (["-E", "0"], ["-E", "> 0"]),
        (["-E", "ten"], ["-E", "not a number"]),
        (["--domE", "-1"], ["--domE", "> 0"]),
        (["-Z", "0"], ["-Z", "> 0"]),
        (["--cut_ga", "-E", "1"], ["--cut_ga", "-E"]),
        (["--cut_ga", "--cut_tc"], ["--cut_tc"]),
        (["--max", "--F1", "0.1"], ["--max", "--F1"]),
        (["--seed", "-3"], ["--seed"]),
        (["--cpu", "-1"], ["--cpu"]),
        (["--db-shards", "0"], ["--db-shards"]),
        (["--backend", "tpu"], ["--backend"]),
    ],
)
def test_bad_option_values(tmp_path, arguments, words):
    _assert_refused(tmp_path, [*arguments, TINY, PROTEINS], *words)


def test_cutoff_missing_from_model(tmp_path):
    import pyhmmer

    with pyhmmer.plan7.HMMFile(TINY) as handle:
        model = handle.read()
    model.cutoffs.gathering = None
    with open(tmp_path / "noga.hmm", "wb") as handle:
        model.write(handle)
    _assert_refused(tmp_path, ["--cut_ga", tmp_path / "noga.hmm", PROTEINS], "noga.hmm", model.name, "gathering")


def test_damaged_database_shard_is_refused(tmp_path):
    run_gpuhmm("makedb", "--shards", "2", PROTEINS, tmp_path / "db")
    shard = tmp_path / "db" / "shard-0001.npz"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    _assert_refused(tmp_path, [TINY, tmp_path / "db"], "shard-0001.npz", "checksum")


def test_unfinished_database_is_refused(tmp_path):
    (tmp_path / "db").mkdir()
    _assert_refused(tmp_path, [TINY, tmp_path / "db"], "db", "makedb")


def test_failed_search_keeps_earlier_tables(tmp_path):
    """No partial output: a failing run leaves an existing table exactly as it was."""
    table = _write(tmp_path / "out.tblout", "earlier run\n")
    process = run_gpuhmm("search", "--tblout", table, TINY, tmp_path / "missing.faa", check=False)
    assert process.returncode != 0
    assert table.read_text() == "earlier run\n"
