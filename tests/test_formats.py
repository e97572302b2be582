"""Sequence files in the formats HMMER 3.4 reads besides FASTA (EMBL and UniProt text, GenBank,
the alignment formats), as targets and as queries, their format detected or asserted with
`--tformat` and `--qformat`: the binaries' tables, `-o` report (header lines included) and `-A`,
byte for byte, and their refusals as one line.

The references are the `hmmer` wheel's own binaries, run on the same files in the test. The
files are written from tests/data's FASTA records (`helpers.formats`); 7LESS_DROME is a UniProt
record of HMMER's tutorial.
"""

from __future__ import annotations

import subprocess

import pytest

import gpuhmm
from gpuhmm import SequenceFormats, placement
from gpuhmm.cli import main
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.options import SEQUENCE_FORMATS
from gpuhmm.output import native
from gpuhmm.worker import STATE

from helpers import formats
from helpers.cli import run_gpuhmm
from helpers.data import DATA, TABLES, header_block, hmmer_binary, report_body, table_body

TINY = DATA / "pfam-tiny.hmm"
PROTEINS = DATA / "proteins.faa"
HELDOUT = DATA / "heldout.faa"
UNIPROT = DATA / "7LESS_DROME"
#: The formats `helpers.formats` writes accessions in (the others have none).
WITH_ACCESSIONS = ("embl", "genbank", "stockholm")

#: Each program's outputs, by flag: the file each is written to.
OUTPUTS = {
    "hmmsearch": {"-o": "report", "-A": "ali", **{f"--{kind}": kind for kind in TABLES}},
    "phmmer": {"-o": "report", "-A": "ali", **{f"--{kind}": kind for kind in TABLES}},
    "hmmscan": {"-o": "report", **{f"--{kind}": kind for kind in TABLES}},
    "jackhmmer": {"-o": "report", "-A": "ali", "--tblout": "tblout", "--domtblout": "domtblout"},
}
COMMANDS = {"hmmsearch": "search", "phmmer": "phmmer", "hmmscan": "scan", "jackhmmer": "jackhmmer"}

#: Header lines that may differ: the program's banner and the threads.
_NOT_COMPARED = ("# hmmsearch ::", "# phmmer ::", "# hmmscan ::", "# jackhmmer ::", "# gpuhmm ::")
_THREADS = ("# number of worker threads:", "# multithread parallelization:")


def _header(report):
    return [line for line in header_block(report) if not line.startswith((*_NOT_COMPARED, *_THREADS))]


def _compare(tmp_path, monkeypatch, program, *arguments, backend="cpu"):
    """`program --cpu 1 --acc ARGUMENTS` and `gpuhmm COMMAND --cpu 1 --acc ARGUMENTS`, every
    output of OUTPUTS[program] written in a folder of each: the same tables, report (its names
    the accessions, where there are any) and alignment. Returns our report."""
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    theirs.mkdir()
    ours.mkdir()
    outputs = [word for flag, name in OUTPUTS[program].items() for word in (flag, name)]
    words = ["--cpu", "1", "--acc", *outputs, *map(str, arguments)]
    subprocess.run([hmmer_binary(program), *words], check=True, cwd=theirs, capture_output=True)
    monkeypatch.chdir(ours)
    assert main([COMMANDS[program], "--backend", backend, *words]) == 0
    for name in OUTPUTS[program].values():
        mine, reference = ours / name, theirs / name
        if name == "report":
            mine, reference = mine.read_text("latin-1"), reference.read_text("latin-1")
            assert report_body(mine) == report_body(reference)
            assert _header(mine) == _header(reference)
        elif name == "ali":
            assert mine.read_bytes() == reference.read_bytes()
        else:
            assert table_body(mine) == table_body(reference), name
    return (ours / "report").read_text("latin-1")


def _pfam_tiny_targets():
    """pfam-tiny's emitted samples among the first real proteins: hits of every model."""
    found = formats.records(PROTEINS)
    return [record for record in found if "Fer4" in record.name or "HTH_AraC" in record.name] + found[:12]


def _rows(path):
    return [line.split() for line in path.read_text().splitlines() if not line.startswith("#")]


# Targets: hmmsearch and phmmer.


@pytest.mark.parametrize(
    "format, asserted",
    [
        ("embl", None),
        ("embl", "UniProt"),
        ("genbank", None),
        ("genbank", "GenBank"),
        ("stockholm", None),
        ("stockholm", "pfam"),
        ("afa", "afa"),
        ("a2m", "a2m"),
        ("clustal", None),
        ("psiblast", None),
        ("phylip", None),
        ("selex", "selex"),
    ],
)
def test_search_reads_targets_in_each_format(tmp_path, monkeypatch, format, asserted):
    targets = formats.write(_pfam_tiny_targets(), tmp_path / f"targets.{format}", format)
    options = ["--tformat", asserted] if asserted else []
    report = _compare(tmp_path, monkeypatch, "hmmsearch", *options, TINY, targets)
    if asserted:
        assert f"# targ <seqfile> format asserted:  {asserted}\n" in header_block(report)
    accessions = {row[1] for row in _rows(tmp_path / "ours" / "tblout")}
    if format in WITH_ACCESSIONS:
        assert "-" in accessions and len(accessions) > 1  # the targets' own accessions, and none


@pytest.mark.parametrize(
    "format, asserted", [("embl", None), ("genbank", "genbank"), ("stockholm", None), ("afa", "afa")]
)
def test_phmmer_reads_targets_in_each_format(tmp_path, monkeypatch, format, asserted):
    queries = tmp_path / "queries.faa"
    first_two = formats.records(DATA / "phmmer-queries.faa")[:2]
    queries.write_text("".join(f">{record.name}\n{record.sequence}\n" for record in first_two))
    names = [record.name for record in first_two] + [record.name for record in formats.records(HELDOUT)[:10]]
    targets = formats.write(formats.records(HELDOUT, names), tmp_path / f"targets.{format}", format)
    options = ["--tformat", asserted] if asserted else []
    report = _compare(tmp_path, monkeypatch, "phmmer", *options, queries, targets)
    if asserted:
        assert f"# target <seqdb> format asserted:  {asserted}\n" in header_block(report)
    assert _rows(tmp_path / "ours" / "tblout")


# Queries: phmmer, jackhmmer and hmmscan.


@pytest.mark.parametrize(
    "format, asserted", [("embl", None), ("genbank", None), ("stockholm", "Stockholm"), ("afa", "afa")]
)
def test_phmmer_reads_queries_in_each_format(tmp_path, monkeypatch, format, asserted):
    queries = formats.write(formats.records(DATA / "phmmer-queries.faa")[:2], tmp_path / f"q.{format}", format)
    options = ["--qformat", asserted] if asserted else []
    report = _compare(tmp_path, monkeypatch, "phmmer", *options, queries, HELDOUT)
    if asserted:
        assert f"# query <seqfile> format asserted: {asserted}\n" in header_block(report)
    assert ("Accession:   Q00000" in report) == (format in WITH_ACCESSIONS)


def test_phmmer_names_its_query_as_phmmer_with_pyhmmers_writers_too(tmp_path, monkeypatch):
    """Where HMMER's own writers cannot be called: the tables name the query's accession, the
    alignments its model, which has none."""
    monkeypatch.setattr(native, "_libraries", lambda: None)
    queries = formats.write(formats.records(DATA / "phmmer-queries.faa")[:2], tmp_path / "q.embl", "embl")
    _compare(tmp_path, monkeypatch, "phmmer", queries, HELDOUT)


@pytest.mark.parametrize("options", [(), ("--qformat", "uniprot", "--tformat", "fasta")])
def test_phmmer_reads_hmmers_uniprot_tutorial_query(tmp_path, monkeypatch, options):
    report = _compare(tmp_path, monkeypatch, "phmmer", *options, UNIPROT, HELDOUT)
    assert "Accession:   P13368\nDescription: RecName: Full=Protein sevenless;" in report


@pytest.mark.parametrize("queries, targets", [("embl", None), ("stockholm", "genbank")])
def test_jackhmmer_reads_queries_and_targets_in_other_formats(tmp_path, monkeypatch, queries, targets):
    query_file = formats.write(formats.records(DATA / "jackhmmer-short.faa"), tmp_path / "q.txt", queries)
    options = ["-N", "2", "--qformat", queries]
    database = PROTEINS
    if targets:
        found = formats.records(PROTEINS)
        chosen = [record for record in found if "PTS_EIIB" in record.name or "Fer4" in record.name] + found[:10]
        database = formats.write(chosen, tmp_path / "targets.txt", targets)
        options += ["--tformat", targets]
    report = _compare(tmp_path, monkeypatch, "jackhmmer", *options, query_file, database)
    assert f"# query <seqfile> format asserted: {queries}\n" in header_block(report)


@pytest.mark.parametrize(
    "format, asserted", [("embl", None), ("genbank", "genbank"), ("stockholm", None), ("afa", "afa")]
)
def test_scan_reads_queries_in_each_format(tmp_path, monkeypatch, format, asserted):
    models = tmp_path / "tiny.hmm"
    models.write_bytes(TINY.read_bytes())
    subprocess.run([hmmer_binary("hmmpress"), models], check=True, capture_output=True)
    queries = formats.write(_pfam_tiny_targets(), tmp_path / f"queries.{format}", format)
    options = ["--qformat", asserted] if asserted else []
    report = _compare(tmp_path, monkeypatch, "hmmscan", *options, models, queries)
    if asserted:
        assert f"# input seqfile format asserted:   {asserted}\n" in header_block(report)
    accessions = {row[3] for row in _rows(tmp_path / "ours" / "tblout")}
    assert (accessions > {"-"}) == (format in WITH_ACCESSIONS)  # the queries' own, where they have them


# The database, the API and the GPU path.


def test_makedb_keeps_the_accessions_of_a_file_in_another_format(tmp_path, monkeypatch):
    targets = formats.write(_pfam_tiny_targets(), tmp_path / "targets.sto", "stockholm")
    assert main(["makedb", str(targets), str(tmp_path / "db"), "--shards", "2", "--tformat", "stockholm"]) == 0
    _compare(tmp_path, monkeypatch, "hmmsearch", TINY, targets)
    (tmp_path / "again").mkdir()
    monkeypatch.chdir(tmp_path / "again")
    assert main(["search", "--cpu", "1", "--tblout", "tblout", str(TINY), str(tmp_path / "db")]) == 0
    assert table_body(tmp_path / "again" / "tblout") == table_body(tmp_path / "theirs" / "tblout")


def test_the_api_takes_the_asserted_formats(tmp_path):
    targets = formats.write(_pfam_tiny_targets(), tmp_path / "targets.txt", "embl")
    hits = gpuhmm.hmmsearch(TINY, targets, formats=SequenceFormats(tformat="embl"))
    assert {hit.accession for top in hits for hit in top} > {None}
    with pytest.raises(gpuhmm.GpuhmmError, match="--qformat: hmmsearch has no such option"):
        gpuhmm.hmmsearch(TINY, targets, formats=SequenceFormats(qformat="embl"))
    with pytest.raises(gpuhmm.GpuhmmError, match="--tformat: nexus is not a recognized sequence file format"):
        SequenceFormats(tformat="nexus")


@pytest.mark.parametrize("program", ["hmmsearch", "hmmscan"])
def test_the_gpu_path_keeps_the_accessions(tmp_path, monkeypatch, program):
    """The GPU filters' survivors (the filters' numpy model here) reach pyhmmer with their
    accessions, as targets and as hmmscan's queries."""
    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))
    models = tmp_path / "tiny.hmm"
    models.write_bytes(TINY.read_bytes())
    subprocess.run([hmmer_binary("hmmpress"), models], check=True, capture_output=True)
    sequences = formats.write(_pfam_tiny_targets(), tmp_path / "sequences.txt", "embl")
    _compare(tmp_path, monkeypatch, program, models, sequences, backend="gpu")


# Refusals: one line, exit status 1, nothing written, where the binaries refuse too.


def _refused(tmp_path, program, arguments, *words):
    """The binary refuses `arguments`; so does gpuhmm, in one line with `words`, writing nothing."""
    refused = subprocess.run([hmmer_binary(program), "--tblout", tmp_path / "theirs", *arguments], capture_output=True)
    assert refused.returncode != 0
    process = run_gpuhmm(COMMANDS[program], "--tblout", tmp_path / "ours", *arguments, check=False)
    lines = process.stderr.strip().splitlines()
    assert process.returncode == 1 and len(lines) == 1, process.stderr
    assert lines[0].startswith(f"gpuhmm {COMMANDS[program]}: error: "), lines[0]
    assert all(str(word) in lines[0] for word in words), lines[0]
    assert not (tmp_path / "ours").exists()


@pytest.mark.parametrize(
    "program, arguments, words",
    [
        ("hmmsearch", ["--tformat", "nexus", TINY, PROTEINS], ["--tformat", "nexus is not a recognized"]),
        ("phmmer", ["--qformat", "nexus", UNIPROT, PROTEINS], ["--qformat", "nexus is not a recognized"]),
        ("phmmer", ["--tformat", "nexus", UNIPROT, PROTEINS], ["--tformat", "nexus is not a recognized"]),
        ("jackhmmer", ["--qformat", "nexus", UNIPROT, PROTEINS], ["--qformat", "nexus is not a recognized"]),
        ("hmmscan", ["--tformat", "fasta", TINY, PROTEINS], ["unrecognized arguments: --tformat"]),
        ("hmmsearch", ["--tformat", "embl", TINY, PROTEINS], [PROTEINS, "not a readable embl file", "ID line"]),
        ("phmmer", ["--qformat", "stockholm", PROTEINS, PROTEINS], [PROTEINS, "stockholm", "Stockholm header"]),
        ("phmmer", ["--tformat", "afa", UNIPROT, PROTEINS], [PROTEINS, "not a readable afa file"]),
        ("hmmsearch", ["--tformat", "fmindex", TINY, PROTEINS], [PROTEINS, "FM-index"]),
        ("hmmsearch", ["--tformat", "ncbi", TINY, PROTEINS], [PROTEINS, "NCBI BLAST"]),
    ],
)
def test_a_format_the_binaries_refuse_is_one_line(tmp_path, program, arguments, words):
    _refused(tmp_path, program, arguments, *words)


def test_scan_refuses_a_malformed_query_file_of_the_asserted_format(tmp_path):
    models = tmp_path / "tiny.hmm"
    models.write_bytes(TINY.read_bytes())
    subprocess.run([hmmer_binary("hmmpress"), models], check=True, capture_output=True)
    _refused(tmp_path, "hmmscan", ["--qformat", "embl", models, PROTEINS], PROTEINS, "not a readable embl file")


def test_an_aligned_fasta_file_is_detected_as_fasta_and_refused_for_its_gaps(tmp_path):
    """Easel takes a file whose first line starts with '>' for FASTA, which holds no gaps."""
    aligned = formats.write(_pfam_tiny_targets(), tmp_path / "aligned.txt", "afa")
    _refused(tmp_path, "hmmsearch", [TINY, aligned], aligned, "illegal character -")


def test_a_file_in_no_format_is_one_line(tmp_path):
    neither = tmp_path / "neither.txt"
    neither.write_text("this is no sequence file\n")
    _refused(tmp_path, "hmmsearch", [TINY, neither], neither, "format not recognized")


def test_makedb_refuses_an_unknown_format_in_one_line(tmp_path):
    process = run_gpuhmm("makedb", PROTEINS, tmp_path / "db", "--tformat", "nexus", check=False)
    assert process.returncode == 1
    known = ", ".join(SEQUENCE_FORMATS)
    assert process.stderr.splitlines() == [
        f"gpuhmm makedb: error: --tformat: nexus is not a recognized sequence file format ({known})"
    ]
    assert not (tmp_path / "db").exists()
