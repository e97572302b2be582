"""A sequence file larger than the shard memory streams through a search in this process
(`db.stream`, `streamed`): on the CPU threads read in Easel's blocks while the blocks read are
searched; on the GPU read in pieces of plain FASTA, each held as a database while the next is
read. Each way gives hmmsearch's and phmmer's tables for every golden case (the pieces here on
the CPU backend, the choice forced), and reading errors stay one line, nothing written; a file
that is not plain FASTA past its first pieces is read whole, by Easel."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpuhmm import placement
from gpuhmm.cli import main
from gpuhmm.db import plainfasta, stream
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.worker import STATE

from helpers.cli import golden_searches, gpuhmm_log, run_golden, run_tables, streamed_parts
from helpers.data import DATA, TABLES, assert_tables_equal

#: Forces streaming on the test data, in blocks of a few sequences.
STREAMING = ("--backend", "cpu", "--cpu", 2, "--shard-memory", "0.000001")


@pytest.fixture(params=["blocks", "pieces"])
def streaming(request, monkeypatch, caplog):
    """Easel's blocks of a few sequences, or instead pieces of plain FASTA of a few sequences."""
    monkeypatch.setattr(stream, "BLOCK_RESIDUES", 5000)
    if request.param == "pieces":
        _in_pieces(monkeypatch)
    with gpuhmm_log(caplog):
        yield caplog


def _in_pieces(monkeypatch):
    """The searches that would stream their file in Easel's blocks read it in pieces instead,
    of one chunk of 2,500 bytes each (their size from the shard memory is less)."""
    monkeypatch.setattr(plainfasta, "PLAIN_CHUNK_BYTES", 2500)
    chosen = stream.chosen
    monkeypatch.setattr(stream, "chosen", lambda *arguments: chosen(*arguments) and "pieces")


@pytest.mark.parametrize("command,run,case", golden_searches())
def test_a_streamed_search_gives_the_binarys_tables(tmp_path, streaming, command, run, case):
    run_golden(tmp_path, command, run, case, *STREAMING)
    assert streamed_parts(streaming) > 1


def test_a_file_within_the_shard_memory_is_held(tmp_path, streaming):
    run_golden(tmp_path, "search", "proteins", "defaults", "--backend", "cpu", "--cpu", 2)
    assert not [record for record in streaming.records if "streamed in" in record.getMessage()]


def test_a_bad_residue_in_a_streamed_file_is_one_line_and_writes_nothing(tmp_path, streaming, capsys):
    good = (DATA / "proteins.faa").read_bytes()
    bad = tmp_path / "bad.faa"
    bad.write_bytes(good + b">broken\nACDE1FGH\n")
    table = tmp_path / "out.tblout"
    status = main(["search", "--tblout", str(table), *map(str, STREAMING), str(DATA / "pfam-test.h3m.gz"), str(bad)])
    assert status == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and str(bad) in error[0], error
    assert not table.exists()


def test_a_streamed_sequence_past_hmmers_length_fails_as_a_held_one(tmp_path, streaming, capsys):
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


def test_an_empty_model_file_searches_a_large_file_as_a_held_one(tmp_path, streaming):
    """An empty model shard (`--hits`, as splitmodels leaves one) over a file past the shard
    memory: no model, nothing to stream, and the search succeeds."""
    empty = tmp_path / "empty.hmm"
    empty.write_bytes(b"")
    hits = tmp_path / "out.hits"
    arguments = ["search", "--hits", str(hits), *map(str, STREAMING)]
    assert main([*arguments, str(empty), str(DATA / "proteins.faa")]) == 0
    assert hits.exists()


def test_a_file_not_plain_past_its_first_pieces_is_searched_whole(tmp_path, monkeypatch, caplog):
    crlf = tmp_path / "crlf.faa"  # Easel reads a CR before the line feed; the plain reader does not
    crlf.write_bytes((DATA / "proteins.faa").read_bytes() + b">carriage returns\r\nMKVLAAGIVALLLAAGCSS\r\n")
    models = DATA / "pfam-test.h3m.gz"
    (tmp_path / "pieces").mkdir()
    (tmp_path / "held").mkdir()
    _in_pieces(monkeypatch)
    with gpuhmm_log(caplog):
        status, pieces = run_tables(tmp_path / "pieces", "search", *STREAMING, models, crlf)
    assert status == 0
    assert streamed_parts(caplog) == 1  # the whole file as one database, not its pieces
    status, held = run_tables(tmp_path / "held", "search", "--backend", "cpu", "--cpu", 2, models, crlf)
    assert status == 0
    for kind in TABLES:
        assert_tables_equal(pieces[kind], held[kind])


@pytest.mark.parametrize(
    "program,backend,megabytes,shard_memory,format,expected",
    [
        ("hmmsearch", "gpu", 3, 2 << 20, None, "pieces"),
        ("phmmer", "gpu", 3, 2 << 20, "fasta", "pieces"),
        ("hmmsearch", "gpu", 3, None, None, None),  # read ahead and held: within READ_AHEAD_MAX_BYTES
        ("hmmsearch", "gpu", 3, 2 << 20, "embl", None),
        ("jackhmmer", "gpu", 3, 2 << 20, None, "pieces"),  # each round reads the file again
        ("jackhmmer", "gpu", 1, 2 << 20, None, None),  # within the shard memory: its rounds keep it
        ("hmmscan", "gpu", 3, 2 << 20, None, None),
        ("hmmsearch", "cpu", 3, 2 << 20, None, "blocks"),
    ],
)
def test_the_gpu_reads_a_fasta_file_past_the_shard_memory_in_pieces(
    tmp_path, program, backend, megabytes, shard_memory, format, expected
):
    sequences = tmp_path / "large.faa"
    sequences.write_bytes(b">x\n" + b"A" * (megabytes << 20) + b"\n")
    executor = SimpleNamespace(in_process=True)
    assert stream.chosen(program, backend, executor, None, sequences, shard_memory, format) == expected
    assert stream.chosen(program, backend, executor, tmp_path / "shuffled.tsv", sequences, shard_memory, format) is None


def test_the_gpu_path_searches_a_file_past_its_shard_memory_in_pieces(tmp_path, monkeypatch, caplog):
    """The GPU backend's own choice, its stages run by the reference engine."""
    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))
    _search_past_the_shard_memory(tmp_path, monkeypatch, caplog, "defaults")


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["defaults", "cut_ga"])
def test_the_gpu_searches_a_file_past_its_shard_memory_in_pieces(tmp_path, monkeypatch, caplog, case):
    _search_past_the_shard_memory(tmp_path, monkeypatch, caplog, case)


def _search_past_the_shard_memory(tmp_path, monkeypatch, caplog, case):
    """proteins.faa (219 KB) past a shard memory of 200 KB: pieces of 25 KB."""
    monkeypatch.setattr(plainfasta, "PLAIN_CHUNK_BYTES", 2500)
    with gpuhmm_log(caplog):
        run_golden(tmp_path, "search", "proteins", case, "--backend", "gpu", "--shard-memory", "0.0002")
    assert streamed_parts(caplog) > 1
