"""A sequence file larger than the shard memory streams through a search on the CPU threads
(`db.stream`, `streamed`): read in blocks while the blocks read are searched, with hmmsearch's
and phmmer's tables for every golden case; reading errors stay one line, nothing written."""

from __future__ import annotations

import logging

import pytest

from gpuhmm.cli import main
from gpuhmm.db import stream

from helpers.cli import golden_runs, run_golden
from helpers.data import DATA

#: Forces streaming on the test data, in blocks of a few sequences.
STREAMING = ("--backend", "cpu", "--cpu", 2, "--shard-memory", "0.000001")


@pytest.fixture
def small_blocks(monkeypatch, caplog):
    monkeypatch.setattr(stream, "BLOCK_RESIDUES", 5000)
    gpuhmm_log = logging.getLogger("gpuhmm")
    gpuhmm_log.addHandler(caplog.handler)  # the CLI's own handler does not propagate
    caplog.set_level(logging.INFO, logger="gpuhmm")
    yield caplog
    gpuhmm_log.removeHandler(caplog.handler)


def _streamed_blocks(caplog):
    # once, though caplog may hear it twice
    found = list(
        dict.fromkeys(record.getMessage() for record in caplog.records if "streamed in" in record.getMessage())
    )
    assert len(found) == 1, "the search did not stream once"
    return int(found[0].split("streamed in ")[1].split()[0])


@pytest.mark.parametrize(
    "command,run,case",
    [("search", run, case) for run, spec in golden_runs().items() for case in spec["cases"]]
    + [("phmmer", run, case) for run, spec in golden_runs("phmmer").items() for case in spec["cases"]],
)
def test_a_streamed_search_gives_the_binarys_tables(tmp_path, small_blocks, command, run, case):
    run_golden(tmp_path, command, run, case, *STREAMING)
    assert _streamed_blocks(small_blocks) > 1


def test_a_file_within_the_shard_memory_is_held(tmp_path, small_blocks):
    run_golden(tmp_path, "search", "proteins", "defaults", "--backend", "cpu", "--cpu", 2)
    assert not [record for record in small_blocks.records if "streamed in" in record.getMessage()]


def test_a_bad_residue_in_a_streamed_file_is_one_line_and_writes_nothing(tmp_path, small_blocks, capsys):
    good = (DATA / "proteins.faa").read_bytes()
    bad = tmp_path / "bad.faa"
    bad.write_bytes(good + b">broken\nACDE1FGH\n")
    table = tmp_path / "out.tblout"
    status = main(["search", "--tblout", str(table), *map(str, STREAMING), str(DATA / "pfam-test.h3m.gz"), str(bad)])
    assert status == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and str(bad) in error[0], error
    assert not table.exists()


def test_a_streamed_sequence_past_hmmers_length_fails_as_a_held_one(tmp_path, small_blocks, capsys):
    long = tmp_path / "long.faa"
    long.write_text(">short\nACDEFGHIKL\n>huge desc\n" + "ACDEFGHIKLMNPQRSTVWY" * 5001 + "\n")
    errors = []
    for memory in ("0.000001", "100"):  # streamed, then held
        table = tmp_path / f"{memory}.tblout"
        arguments = ["--backend", "cpu", "--cpu", "2", "--shard-memory", memory, "--tblout", str(table)]
        assert main(["search", *arguments, str(DATA / "pfam-test.h3m.gz"), str(long)]) == 1
        errors.append(capsys.readouterr().err.strip().splitlines())
        assert not table.exists()
    assert len(errors[0]) == 1 and errors[0] == errors[1] and "'huge' has 100,020 residues" in errors[0][0]


def test_an_empty_model_file_searches_a_large_file_as_a_held_one(tmp_path, small_blocks):
    """An empty model shard (`--hits`, as splitmodels leaves one) over a file past the shard
    memory: no model, nothing to stream, and the search succeeds."""
    empty = tmp_path / "empty.hmm"
    empty.write_bytes(b"")
    hits = tmp_path / "out.hits"
    arguments = ["search", "--hits", str(hits), *map(str, STREAMING)]
    assert main([*arguments, str(empty), str(DATA / "proteins.faa")]) == 0
    assert hits.exists()
