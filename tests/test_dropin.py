"""gpuhmm as a drop-in for hmmsearch: outputs that never clobber, paths checked before the
search, the `-o` report and `-A` alignment, standard input and pipes, and hmmsearch's options.

The references are the `hmmer` wheel's own binaries, run on the same inputs in the test.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers.cli import run_gpuhmm
from helpers.data import DATA, ROOT, TABLES, hmmer_binary, report_body, table_body

TINY = DATA / "pfam-tiny.hmm"
MODELS = DATA / "pfam-test.h3m.gz"
PROTEINS = DATA / "proteins.faa"
QUERIES = DATA / "phmmer-queries.faa"


def _reference(program, tmp_path, *arguments, stdin=None):
    """The HMMER binary's outputs in tmp_path/theirs: run as `program --cpu 1 ...` (unless
    `arguments` set --cpu)."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(exist_ok=True)
    threads = [] if "--cpu" in arguments else ["--cpu", "1"]
    subprocess.run(
        [hmmer_binary(program), *threads, *map(str, arguments)],
        check=True,
        cwd=theirs,
        capture_output=True,
        stdin=stdin,
    )
    return theirs


def tables_of(directory):
    return [f"--{kind}" for kind in TABLES], [directory / f"out.{kind}" for kind in TABLES]


def _with_tables(directory):
    flags, paths = tables_of(directory)
    return [word for flag, path in zip(flags, paths) for word in (flag, path)]


def _assert_same_tables(ours, theirs):
    for kind in TABLES:
        assert table_body(ours / f"out.{kind}") == table_body(theirs / f"out.{kind}"), kind


def _ours(tmp_path):
    ours = tmp_path / "ours"
    ours.mkdir(exist_ok=True)
    return ours


# Outputs: written in place where renaming would replace a link, pipe or device.


def test_a_symlinked_output_keeps_its_link(tmp_path):
    target = tmp_path / "kept" / "hits.tblout"
    target.parent.mkdir()
    target.write_text("an older table\n")
    link = tmp_path / "link.tblout"
    link.symlink_to(target)
    run_gpuhmm("search", "--cpu", "1", "-o", tmp_path / "report.txt", "--tblout", link, TINY, PROTEINS)
    theirs = _reference("hmmsearch", tmp_path, "-o", "report.txt", "--tblout", "out.tblout", TINY, PROTEINS)
    assert link.is_symlink() and link.resolve() == target
    assert table_body(target) == table_body(theirs / "out.tblout")


def test_a_fifo_output_is_written_in_place(tmp_path):
    fifo = tmp_path / "hits.fifo"
    os.mkfifo(fifo)
    read = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    run_gpuhmm("search", "--cpu", "1", "-o", tmp_path / "report.txt", "--tblout", fifo, TINY, PROTEINS)
    reader.join(60)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    (tmp_path / "from-fifo.tblout").write_bytes(read[0])
    theirs = _reference("hmmsearch", tmp_path, "-o", "report.txt", "--tblout", "out.tblout", TINY, PROTEINS)
    assert table_body(tmp_path / "from-fifo.tblout") == table_body(theirs / "out.tblout")


def test_a_dash_is_standard_output(tmp_path):
    process = run_gpuhmm("search", "--cpu", "1", "-o", tmp_path / "report.txt", "--tblout", "-", TINY, PROTEINS)
    (tmp_path / "stdout.tblout").write_text(process.stdout)
    theirs = _reference("hmmsearch", tmp_path, "-o", "report.txt", "--tblout", "out.tblout", TINY, PROTEINS)
    assert table_body(tmp_path / "stdout.tblout") == table_body(theirs / "out.tblout")


# Bad output paths: refused before the search, one line, exit 1, nothing written.


def _assert_refused_before_the_search(tmp_path, arguments, *words):
    before = sorted(tmp_path.rglob("*"))
    process = run_gpuhmm("search", "--cpu", "1", *arguments, TINY, PROTEINS, check=False, cwd=tmp_path)
    assert process.returncode == 1, process.stderr
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuhmm search: error: "), process.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert sorted(tmp_path.rglob("*")) == before  # no table, no temporary file left


def test_an_output_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "adir").mkdir()
    _assert_refused_before_the_search(tmp_path, ["--tblout", "t.tbl", "--domtblout", "adir"], "adir", "directory")


def test_one_path_for_two_outputs_is_refused(tmp_path):
    _assert_refused_before_the_search(
        tmp_path, ["--tblout", "same.tbl", "--domtblout", "same.tbl"], "same.tbl", "--tblout", "--domtblout"
    )


def test_an_output_in_a_missing_directory_is_refused(tmp_path):
    _assert_refused_before_the_search(tmp_path, ["--tblout", "nowhere/t.tbl"], "nowhere", "does not exist")


def test_an_output_where_no_file_can_be_made_is_refused(tmp_path):
    """A file system that takes no new files (sysfs, even for root), found by trying to make one."""
    _assert_refused_before_the_search(tmp_path, ["--tblout", "/sys/gpuhmm.tbl"], "/sys", "cannot write")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any directory")
def test_an_output_in_an_unwritable_directory_is_refused(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        _assert_refused_before_the_search(tmp_path, ["--tblout", "locked/t.tbl"], "locked", "cannot write")
    finally:
        locked.chmod(0o755)


# Inputs: the alphabet comes from the models; standard input, pipes and process substitution.


def test_a_protein_file_that_looks_like_dna_is_searched_as_protein(tmp_path):
    """hmmsearch never guesses: a first record of A, C, G and T only is still protein."""
    faa = tmp_path / "linker-first.faa"
    faa.write_text(">linker\nACGTAGCTAGGACTAGCATCGATCGATGCA\n" + PROTEINS.read_text())
    ours = _ours(tmp_path)
    run_gpuhmm("search", "--cpu", "1", "-o", ours / "report.txt", *_with_tables(ours), MODELS, faa)
    theirs = _reference("hmmsearch", tmp_path, "-o", "report.txt", *_with_tables(Path(".")), MODELS, faa)
    _assert_same_tables(ours, theirs)
    database = tmp_path / "db"
    run_gpuhmm("makedb", faa, database, "--shards", "2", "--models", MODELS)
    again = tmp_path / "again"
    again.mkdir()
    run_gpuhmm("search", "--cpu", "1", "-o", again / "report.txt", *_with_tables(again), MODELS, database)
    _assert_same_tables(again, theirs)


#: The CLI as a user runs it, in a fresh interpreter.
GPUHMM = [sys.executable, "-m", "gpuhmm"]
ENVIRONMENT = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def _search_reading(stdin_path, *arguments):
    """`gpuhmm search ARGUMENTS` with standard input read from `stdin_path`."""
    with open(stdin_path, "rb") as stdin:
        return subprocess.run(
            [*GPUHMM, "search", *map(str, arguments)], stdin=stdin, capture_output=True, env=ENVIRONMENT
        )


@pytest.mark.parametrize("how", ["dash", "dev-stdin", "pipe", "gzip-pipe", "process-substitution"])
def test_sequences_from_standard_input_and_pipes(tmp_path, how):
    ours = _ours(tmp_path)
    arguments = ["--cpu", "1", "-o", ours / "report.txt", *_with_tables(ours), MODELS]
    if how in ("dash", "dev-stdin"):
        process = _search_reading(PROTEINS, *arguments, "-" if how == "dash" else "/dev/stdin")
    else:
        source = {"pipe": "cat", "gzip-pipe": "gzip -c", "process-substitution": "cat"}[how] + f" {PROTEINS}"
        line = " ".join(f"'{word}'" for word in [*GPUHMM, "search", *map(str, arguments)])
        line = f"{line} <({source})" if how == "process-substitution" else f"{source} | {line} -"
        process = subprocess.run(["bash", "-c", line], capture_output=True, env=ENVIRONMENT)
    assert process.returncode == 0, process.stderr
    theirs = _reference("hmmsearch", tmp_path, "-o", "report.txt", *_with_tables(Path(".")), MODELS, PROTEINS)
    _assert_same_tables(ours, theirs)


def test_models_from_standard_input(tmp_path):
    ours = _ours(tmp_path)
    process = _search_reading(TINY, "--cpu", "1", "-o", ours / "report.txt", *_with_tables(ours), "-", PROTEINS)
    assert process.returncode == 0, process.stderr
    theirs = _reference("hmmsearch", tmp_path, "-o", "report.txt", *_with_tables(Path(".")), TINY, PROTEINS)
    _assert_same_tables(ours, theirs)


def test_an_unreadable_stream_is_named_in_the_error(tmp_path):
    empty = tmp_path / "empty.faa"
    empty.write_text("")
    process = _search_reading(empty, "-o", tmp_path / "r.txt", TINY, "-")
    assert process.returncode == 1
    assert process.stderr.decode().strip() == "gpuhmm search: error: -: sequence file is empty"


def test_phmmer_skips_an_empty_query_as_phmmer_does(tmp_path):
    queries = tmp_path / "queries.faa"
    first, second = QUERIES.read_text().split("\n>")[:2]
    queries.write_text(f"{first}\n>empty\n>{second}\n")
    ours = _ours(tmp_path)
    run_gpuhmm("phmmer", "--cpu", "1", "-o", ours / "report.txt", *_with_tables(ours), queries, PROTEINS)
    theirs = _reference("phmmer", tmp_path, "-o", "report.txt", *_with_tables(Path(".")), queries, PROTEINS)
    _assert_same_tables(ours, theirs)
    assert report_body((ours / "report.txt").read_text()) == report_body((theirs / "report.txt").read_text())


# The -o report and -A alignment, as hmmsearch, phmmer and hmmscan write them.


@pytest.mark.parametrize("options", [(), ("--noali",), ("--acc", "--notextw"), ("--cut_ga", "--textw", "150")])
def test_search_report_and_alignment_identical_to_hmmsearch(tmp_path, options):
    ours = _ours(tmp_path)
    run_gpuhmm(
        "search",
        "--cpu",
        "2",
        "--db-shards",
        "3",
        *options,
        "-o",
        "report.txt",
        "-A",
        "ali.sto",
        MODELS,
        PROTEINS,
        cwd=ours,
    )
    theirs = _reference("hmmsearch", tmp_path, *options, "-o", "report.txt", "-A", "ali.sto", MODELS, PROTEINS)
    assert report_body((ours / "report.txt").read_text()) == report_body((theirs / "report.txt").read_text())
    assert (ours / "ali.sto").read_bytes() == (theirs / "ali.sto").read_bytes()


def test_the_report_goes_to_standard_output_by_default(tmp_path):
    process = run_gpuhmm("search", "--cpu", "1", "--noali", TINY, PROTEINS)
    theirs = _reference("hmmsearch", tmp_path, "--noali", "-o", "report.txt", TINY, PROTEINS)
    assert report_body(process.stdout) == report_body((theirs / "report.txt").read_text())


def test_phmmer_and_scan_reports_identical(tmp_path):
    ours = _ours(tmp_path)
    run_gpuhmm("phmmer", "--cpu", "1", "-o", "phmmer.txt", "-A", "phmmer.sto", QUERIES, PROTEINS, cwd=ours)
    theirs = _reference("phmmer", tmp_path, "-o", "phmmer.txt", "-A", "phmmer.sto", QUERIES, PROTEINS)
    assert report_body((ours / "phmmer.txt").read_text()) == report_body((theirs / "phmmer.txt").read_text())
    assert (ours / "phmmer.sto").read_bytes() == (theirs / "phmmer.sto").read_bytes()
    pressed = tmp_path / "theirs" / "tiny.hmm"
    pressed.write_bytes(TINY.read_bytes())
    subprocess.run([hmmer_binary("hmmpress"), pressed], check=True, capture_output=True)
    run_gpuhmm("scan", "--cpu", "1", "-o", ours / "scan.txt", TINY, DATA / "heldout.faa")
    _reference("hmmscan", tmp_path, "-o", "scan.txt", "tiny.hmm", DATA / "heldout.faa")
    assert report_body((ours / "scan.txt").read_text()) == report_body((theirs / "scan.txt").read_text())


# hmmsearch's other options, and its usage errors.


@pytest.mark.parametrize("options", [("--cpu", "0"), ("-E", "inf"), ("--nonull2",), ("--tformat", "fasta")])
def test_options_hmmsearch_accepts(tmp_path, options):
    ours = _ours(tmp_path)
    run_gpuhmm("search", *options, "-o", ours / "report.txt", *_with_tables(ours), MODELS, PROTEINS)
    theirs = _reference("hmmsearch", tmp_path, *options, "-o", "report.txt", *_with_tables(Path(".")), MODELS, PROTEINS)
    _assert_same_tables(ours, theirs)


@pytest.mark.parametrize(
    "arguments, words",
    [
        (["--bogus"], ["--bogus"]),
        (["-E", "ten"], ["-E", "not a number"]),
        (["-E", "-1"], ["-E", "> 0"]),
        (["--tformat", "nexus"], ["--tformat", "nexus is not a recognized sequence file format"]),
        (["--textw", "80"], ["--textw", "120"]),
    ],
)
def test_usage_errors_are_one_line_and_exit_1(tmp_path, arguments, words):
    process = run_gpuhmm("search", *arguments, TINY, PROTEINS, check=False, cwd=tmp_path)
    assert process.returncode == 1
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].count("gpuhmm search") == 1, process.stderr
    assert lines[0].startswith("gpuhmm search: error: ") and all(word in lines[0] for word in words), lines[0]


@pytest.mark.parametrize(
    "program, options",
    [
        ("search", ["-E", "1", "-T", "5"]),
        ("search", ["-E", "10", "-T", "5"]),  # given, -E counts at its default value too
        ("search", ["--domE", "1", "--domT", "5"]),
        ("search", ["--max", "--F1", "0.02"]),
        ("search", ["--textw", "120", "--notextw"]),
        ("phmmer", ["--incE", "0.01", "--incT", "5"]),
        ("scan", ["--incdomE", "1", "--incdomT", "5"]),
        ("scan", ["--cut_ga", "--domE", "10"]),
        ("jackhmmer", ["-E", "10", "-T", "5"]),
        ("jackhmmer", ["--textw", "120", "--notextw"]),
    ],
)
def test_options_hmmer_refuses_together_are_refused_in_one_line(tmp_path, capsys, program, options):
    from gpuhmm.cli import main

    inputs = [TINY if program in ("search", "scan") else QUERIES, PROTEINS]
    binary = {"search": "hmmsearch", "scan": "hmmscan"}.get(program, program)
    theirs = subprocess.run([hmmer_binary(binary), *options, *inputs], capture_output=True, text=True, cwd=tmp_path)
    assert theirs.returncode == 1 and "Failed to parse command line" in theirs.stdout
    try:
        status = main([program, "--backend", "cpu", *options, *map(str, inputs)])
    except SystemExit as exit:  # argparse's own refusals
        status = exit.code
    error = capsys.readouterr().err
    flags = [word for word in options if word.startswith("-") and not word[1].isdigit()]
    assert status == 1 and error.count("\n") == 1 and error.startswith(f"gpuhmm {program}: error: "), error
    assert flags[0] in error and flags[-1] in error, error


def test_merged_tables_name_the_model_file_given(tmp_path):
    run_gpuhmm("splitmodels", MODELS, tmp_path / "models", "--shards", "2", cwd=tmp_path)
    hits = []
    for shard in sorted((tmp_path / "models").glob("models-*.h3m")):
        hits.append(tmp_path / f"{shard.stem}.hits")
        run_gpuhmm("search", "--cpu", "1", "-o", tmp_path / f"{shard.stem}.txt", "--hits", hits[-1], shard, PROTEINS)
    run_gpuhmm("merge", "--order", tmp_path / "models" / "manifest.json", "--tblout", tmp_path / "merged.tblout", *hits)
    footer = [line for line in (tmp_path / "merged.tblout").read_text().splitlines() if line.startswith("# Query")]
    assert footer == [f"# Query file:      {MODELS}"]


# The README's own commands work once its environment is active.


def test_the_readmes_commands_run_in_its_environment():
    readme = (ROOT / "README.md").read_text()
    assert "source .venv/bin/activate" in readme
    if not (ROOT / ".venv" / "bin" / "activate").exists():
        pytest.skip("no .venv here: `make test` makes one")
    process = subprocess.run(
        ["bash", "-c", "source .venv/bin/activate && gpuhmm --version && snakemake --version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert process.returncode == 0, process.stderr


def test_scan_report_on_the_gpu_path_counts_every_model(tmp_path, monkeypatch):
    """On the GPU path each sequence meets only the models its filters passed; the report's
    statistics still count every model, and Z is the number of models, as hmmscan's."""
    import gzip

    from gpuhmm import placement
    from gpuhmm.cli import main
    from gpuhmm.engine.reference import ReferenceEngine
    from gpuhmm.worker import STATE

    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))
    ours = _ours(tmp_path)
    queries = DATA / "heldout.faa"
    assert (
        main(
            [
                "scan",
                "--backend",
                "gpu",
                "--cpu",
                "2",
                "--db-shards",
                "2",
                "-o",
                str(ours / "scan.txt"),
                str(MODELS),
                str(queries),
            ]
        )
        == 0
    )
    pressed = tmp_path / "theirs" / "models.hmm"
    pressed.parent.mkdir()
    pressed.write_bytes(gzip.decompress(MODELS.read_bytes()))
    subprocess.run([hmmer_binary("hmmpress"), pressed], check=True, capture_output=True)
    _reference("hmmscan", tmp_path, "-o", "scan.txt", "models.hmm", queries)
    assert report_body((ours / "scan.txt").read_text()) == report_body((tmp_path / "theirs" / "scan.txt").read_text())
