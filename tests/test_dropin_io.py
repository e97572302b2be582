"""gpuhmm as a drop-in for hmmsearch, its inputs and outputs: FASTA headers and file names that
are not UTF-8, outputs that fail as they are written, output paths hmmsearch takes or that would
replace an input, and the command line's own help and errors.

The references are the `hmmer` wheel's own binaries, run on the same inputs in the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuhmm.cli import main
from gpuhmm.cli_arguments import build_parser

from helpers.cli import run_gpuhmm
from helpers.data import DATA, ROOT, TABLES, hmmer_binary

TINY = DATA / "pfam-tiny.hmm"
MODELS = DATA / "pfam-test.h3m.gz"
PROTEINS = DATA / "proteins.faa"

#: Records of proteins.faa that hit pfam-tiny's models, with their headers rewritten: Latin-1
#: names and descriptions (é, à, «, », non-breaking spaces, µ), UTF-8 ones, and a UTF-8
#: description long enough that the report cuts it inside a character. None keeps the header.
HEADERS = {
    b"938293.PRJEB85.HG003691_10": b"938293.PRJEB85.HG003691_10 prot\xe9ine \xe0 centre 4Fe-4S \xab\xa0Fer4\xa0\xbb",
    b"938293.PRJEB85.HG003686_254": b"938293.PRJEB85.HG003686_254 r\xc3\xa9gulateur transcriptionnel "
    + b"\xc3\xa9" * 40,
    b"emit_Fer4_1": b"emit_Fer4_1_caf\xe9 \xb5M",
    b"emit_HTH_AraC_2": b"emit_HTH_AraC_2_\xc3\xa9t\xc3\xa9 d\xe9j\xe0 vu",
    b"emit_HTH_AraC_4": None,
    b"938293.PRJEB85.HG003686_320": None,
}


def _latin1_fasta(path, newline=b"\n"):
    """The records of HEADERS from proteins.faa, in file order, headers rewritten."""
    records = []
    for record in PROTEINS.read_bytes().split(b"\n>"):
        header, _, residues = record.removeprefix(b">").partition(b"\n")
        name = header.split(None, 1)[0] if header else b""
        if name in HEADERS:
            lines = [b">" + (HEADERS[name] or header), *residues.split()]
            records.append(newline.join(lines) + newline)
    assert len(records) == len(HEADERS)
    path.write_bytes(b"".join(records))
    return path


def _table_body(path):
    """A table's bytes without its footer (program, options, directory, date)."""
    lines = Path(path).read_bytes().splitlines(keepends=True)
    end = next(index for index, line in enumerate(lines) if line.startswith(b"# Program:"))
    return b"".join(lines[: end - 1])


def _report_body(path):
    """A report's bytes without its header block (to the second rule) and timing lines."""
    lines = Path(path).read_bytes().splitlines(keepends=True)
    rules = [index for index, line in enumerate(lines) if line.startswith(b"# - - - -")]
    kept = lines[rules[1] + 2 :]
    return b"".join(line for line in kept if not line.startswith((b"# CPU time:", b"# Mc/sec:")))


def _reference(program, directory, *arguments):
    """HMMER's `program --cpu 1 ARGUMENTS`, run in `directory` (made here)."""
    directory.mkdir(exist_ok=True)
    command = [hmmer_binary(program), "--cpu", "1", *map(str, arguments)]
    subprocess.run(command, check=True, cwd=directory, capture_output=True)
    return directory


def _outputs(directory, alignment=True):
    """-o, -A (unless not `alignment`) and the three tables, in `directory`."""
    words = ["-o", directory / "report.txt"] + (["-A", directory / "ali.sto"] if alignment else [])
    return words + [word for kind in TABLES for word in (f"--{kind}", directory / f"out.{kind}")]


def _assert_same(ours, theirs, alignment=True):
    for kind in TABLES:
        assert _table_body(ours / f"out.{kind}") == _table_body(theirs / f"out.{kind}"), kind
    assert _report_body(ours / "report.txt") == _report_body(theirs / "report.txt")
    if alignment:
        assert (ours / "ali.sto").read_bytes() == (theirs / "ali.sto").read_bytes()


def _gpuhmm(*arguments):
    """`gpuhmm ARGUMENTS` in this process; asserts it succeeds."""
    assert main([*map(str, arguments)]) == 0


def _ours(tmp_path, monkeypatch, name="ours"):
    """A directory to run gpuhmm in, as the reference runs in its own: the report names `-A`'s path."""
    directory = tmp_path / name
    directory.mkdir()
    monkeypatch.chdir(directory)
    return directory


# Item: FASTA headers that are not UTF-8 are searched, and written back byte for byte.


def test_a_latin1_fasta_is_searched_and_written_as_hmmsearch_does(tmp_path, monkeypatch):
    fasta = _latin1_fasta(tmp_path / "latin1.faa")
    ours = _ours(tmp_path, monkeypatch)
    domains = ours / "domains.tsv"
    _gpuhmm("search", "--cpu", "2", "--db-shards", "2", *_outputs(Path(".")), "--domains", domains, TINY, fasta)
    theirs = _reference("hmmsearch", tmp_path / "theirs", *_outputs(Path(".")), TINY, fasta)
    _assert_same(ours, theirs)
    # The domain table (gpuhmm's own) names each sequence with the bytes tblout does.
    rows = [line.split(b"\t") for line in domains.read_bytes().splitlines()[1:]]
    targets = {line.split()[0] for line in _table_body(ours / "out.tblout").splitlines() if not line.startswith(b"#")}
    assert {row[0] for row in rows} <= targets and b"emit_Fer4_1_caf\xe9" in {row[0] for row in rows}


def test_phmmer_with_latin1_queries_and_targets_as_phmmer(tmp_path, monkeypatch):
    """The queries, in CRLF lines, are read by Easel itself; the targets by the vectorized reader."""
    fasta = _latin1_fasta(tmp_path / "latin1.faa")
    queries = _latin1_fasta(tmp_path / "queries.faa", newline=b"\r\n")
    ours = _ours(tmp_path, monkeypatch)
    _gpuhmm("phmmer", "--cpu", "2", *_outputs(Path(".")), queries, fasta)
    theirs = _reference("phmmer", tmp_path / "theirs", *_outputs(Path(".")), queries, fasta)
    _assert_same(ours, theirs)


def test_scan_of_latin1_queries_as_hmmscan(tmp_path, monkeypatch):
    fasta = _latin1_fasta(tmp_path / "latin1.faa")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "tiny.hmm").write_bytes(TINY.read_bytes())
    subprocess.run([hmmer_binary("hmmpress"), theirs / "tiny.hmm"], check=True, capture_output=True)
    ours = _ours(tmp_path, monkeypatch)
    _gpuhmm("scan", "--cpu", "2", *_outputs(Path("."), alignment=False), TINY, fasta)
    _reference("hmmscan", theirs, *_outputs(Path("."), alignment=False), "tiny.hmm", fasta)
    _assert_same(ours, theirs, alignment=False)


def test_a_latin1_database_and_standard_input_as_hmmsearch(tmp_path, monkeypatch):
    fasta = _latin1_fasta(tmp_path / "latin1.faa")
    theirs = _reference("hmmsearch", tmp_path / "theirs", *_outputs(Path(".")), TINY, fasta)
    database = tmp_path / "db"
    _gpuhmm("makedb", fasta, database, "--shards", "2", "--models", TINY)
    from_database = _ours(tmp_path, monkeypatch, "from-database")
    _gpuhmm("search", "--cpu", "2", *_outputs(Path(".")), TINY, database)
    _assert_same(from_database, theirs)
    from_stdin = tmp_path / "from-stdin"
    from_stdin.mkdir()
    with open(fasta, "rb") as stdin:
        process = subprocess.run(
            [sys.executable, "-m", "gpuhmm", "search", "--cpu", "1", *map(str, _outputs(Path("."))), TINY, "-"],
            stdin=stdin,
            capture_output=True,
            cwd=from_stdin,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        )
    assert process.returncode == 0, process.stderr
    _assert_same(from_stdin, theirs)


def test_latin1_queries_and_targets_on_the_gpu_path_as_phmmer(tmp_path, monkeypatch):
    """The GPU backend's filters (the numpy reference engine standing in for the kernels) and
    pyhmmer after them: the hits keep their bytes through the worker's name index."""
    from gpuhmm import placement
    from gpuhmm.engine.reference import ReferenceEngine
    from gpuhmm.worker import STATE

    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))
    fasta = _latin1_fasta(tmp_path / "latin1.faa")
    ours = _ours(tmp_path, monkeypatch)
    _gpuhmm("phmmer", "--backend", "gpu", "--cpu", "2", "--db-shards", "2", *_outputs(Path(".")), fasta, fasta)
    theirs = _reference("phmmer", tmp_path / "theirs", *_outputs(Path(".")), fasta, fasta)
    _assert_same(ours, theirs)


# Item: file names that are not UTF-8 are written back as their bytes, as HMMER writes them.

#: Byte 0xE9 in a file name, as Python holds it ("\udce9").
E9 = os.fsdecode(b"\xe9")

#: Per command: its HMMER binary, its model or query file, its target file, its own outputs.
NAMED = {
    "search": ("hmmsearch", TINY, PROTEINS, ["-A", f"ali{E9}.sto"]),
    "scan": ("hmmscan", TINY, DATA / "heldout.faa", []),
    "phmmer": ("phmmer", DATA / "jackhmmer-short.faa", PROTEINS, ["-A", f"ali{E9}.sto"]),
    "jackhmmer": (
        "jackhmmer",
        DATA / "jackhmmer-short.faa",
        PROTEINS,
        ["-N", "2", "-A", f"ali{E9}.sto", "--chkali", f"chk{E9}"],
    ),
}

#: A report's lines that name the program's threads, which may differ.
THREADS = (b"# number of worker threads:", b"# multithread parallelization:")


def _header_lines(path):
    """A report's header block (to its second rule), less its banner and thread lines."""
    lines = Path(path).read_bytes().splitlines(keepends=True)
    rules = [index for index, line in enumerate(lines) if line.startswith(b"# - - - -")]
    return [line for line in lines[1 : rules[1]] if not line.startswith(THREADS)]


def _lines(path, *prefixes):
    return [line for line in Path(path).read_bytes().splitlines() if line.startswith(prefixes)]


@pytest.mark.parametrize("command", list(NAMED))
def test_file_names_that_are_not_utf8_are_written_as_hmmer_does(tmp_path, monkeypatch, command):
    """Inputs and outputs named with byte 0xE9: the report (its header, its -A lines), the
    tables' footer and the alignments hold the names' bytes as the binary's do. gpuhmm runs as
    its console script does, the names in sys.argv, which pyhmmer's builders log."""
    program, query, target, options = NAMED[command]
    inputs = [tmp_path / f"query{E9}{query.suffix}", tmp_path / f"target{E9}{target.suffix}"]
    for path, source in zip(inputs, (query, target)):
        path.write_bytes(source.read_bytes())
    if command == "scan":  # for hmmscan's own reading
        subprocess.run([hmmer_binary("hmmpress"), inputs[0]], check=True, capture_output=True)
    report, tables = f"out{E9}.txt", [f"tbl{E9}", f"dom{E9}"]
    arguments = ["-o", report, "--tblout", tables[0], "--domtblout", tables[1], *options]
    arguments += [f"../{path.name}" for path in inputs]
    ours = _ours(tmp_path, monkeypatch)
    monkeypatch.setattr(sys, "argv", ["gpuhmm", command, "--cpu", "1", *arguments])
    assert main() == 0
    theirs = _reference(program, tmp_path / "theirs", *arguments)
    assert _header_lines(ours / report) == _header_lines(theirs / report)
    assert _report_body(ours / report) == _report_body(theirs / report)
    files = (b"# Query file:", b"# Target file:")
    for table in tables:
        assert _table_body(ours / table) == _table_body(theirs / table)
        footer = _lines(ours / table, *files)
        assert footer == _lines(theirs / table, *files) and all(b"\xe9" in line for line in footer)
        (settings,) = _lines(ours / table, b"# Option settings:")
        assert all(os.fsencode(word) in settings for word in arguments)
    for alignment in (f"ali{E9}.sto", f"chk{E9}-1.sto", f"chk{E9}-2.sto"):
        assert (ours / alignment).exists() == (theirs / alignment).exists()
        if (theirs / alignment).exists():
            assert (ours / alignment).read_bytes() == (theirs / alignment).read_bytes()


# Item: outputs that fail are one line, not a traceback; hmmsearch fails on them too.


def _assert_one_line_error(process, *words):
    assert process.returncode == 1, process.stderr
    assert "Traceback" not in process.stderr
    errors = [line for line in process.stderr.splitlines() if line.startswith("gpuhmm ")]
    assert len(errors) == 1 and errors[0].startswith("gpuhmm search: error: "), process.stderr
    assert all(word in errors[0] for word in words), errors[0]


def test_an_output_under_a_file_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("a file, not a directory\n")
    process = run_gpuhmm("search", "--cpu", "1", "--tblout", "afile/x.tbl", TINY, PROTEINS, check=False, cwd=tmp_path)
    _assert_one_line_error(process, "afile/x.tbl", "not a directory")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["afile"]
    hmmsearch = [hmmer_binary("hmmsearch"), "--tblout", "afile/x.tbl", TINY, PROTEINS]
    assert subprocess.run(hmmsearch, cwd=tmp_path, capture_output=True).returncode != 0


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize("option, models", [("--tblout", MODELS), ("-A", TINY)])
def test_a_full_device_is_one_line(tmp_path, option, models):
    """Tables and alignments larger than pyhmmer's write buffer, written through its C writers."""
    process = run_gpuhmm("search", "--cpu", "1", "-o", "/dev/null", option, "/dev/full", models, PROTEINS, check=False)
    _assert_one_line_error(process, "/dev/full", "No space left on device")
    hmmsearch = [hmmer_binary("hmmsearch"), "-o", "/dev/null", option, "/dev/full", models, PROTEINS]
    assert subprocess.run(hmmsearch, capture_output=True).returncode != 0


# Item: smaller edges of the outputs and the command line.


def test_outputs_may_share_dev_null_as_in_hmmsearch(tmp_path):
    process = run_gpuhmm(
        "search", "--cpu", "1", "-o", "/dev/null", "--tblout", "/dev/null", TINY, PROTEINS, check=False
    )
    assert process.returncode == 0, process.stderr
    hmmsearch = [hmmer_binary("hmmsearch"), "-o", "/dev/null", "--tblout", "/dev/null", TINY, PROTEINS]
    assert subprocess.run(hmmsearch, capture_output=True).returncode == 0


@pytest.mark.parametrize("which", ["sequences", "models"])
def test_an_output_that_names_an_input_is_refused(tmp_path, which):
    models, sequences = tmp_path / "tiny.hmm", tmp_path / "proteins.faa"
    models.write_bytes(TINY.read_bytes())
    sequences.write_bytes(PROTEINS.read_bytes())
    target = "./proteins.faa" if which == "sequences" else "tiny.hmm"
    arguments = ["-o", "report.txt", "--domtblout", target, "tiny.hmm", "proteins.faa"]
    process = run_gpuhmm("search", "--cpu", "1", *arguments, check=False, cwd=tmp_path)
    _assert_one_line_error(process, f"{Path(target)}: --domtblout", "input")
    assert models.read_bytes() == TINY.read_bytes() and sequences.read_bytes() == PROTEINS.read_bytes()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["proteins.faa", "tiny.hmm"]


def test_makedb_into_a_database_leaves_no_stale_shards(tmp_path):
    database = tmp_path / "db"
    _gpuhmm("makedb", PROTEINS, database, "--shards", "3", "--alphabet", "amino")
    (database / "notes.txt").write_text("not a shard\n")
    _gpuhmm("makedb", PROTEINS, database, "--shards", "1", "--alphabet", "amino")
    assert sorted(path.name for path in database.iterdir()) == ["manifest.json", "notes.txt", "shard-0000.npz"]


def test_a_missing_scheduler_file_is_named(tmp_path):
    process = run_gpuhmm("search", "--scheduler", "nope.json", TINY, PROTEINS, check=False, cwd=tmp_path)
    _assert_one_line_error(process, "nope.json", "scheduler file")
    assert "port" not in process.stderr


def test_no_command_lists_the_commands():
    process = run_gpuhmm(check=False)
    assert process.returncode == 1
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuhmm: error: "), process.stderr
    commands = build_parser()._subparsers._group_actions[0].choices
    assert all(command in lines[0] for command in commands), lines[0]


def test_merge_help_describes_every_option():
    merge = build_parser()._subparsers._group_actions[0].choices["merge"]
    undescribed = [action.dest for action in merge._actions if not action.help]
    assert undescribed == []
    shown = run_gpuhmm("merge", "-h").stdout
    assert "per-sequence hits table" in shown and "run summary (TSV)" in shown


def test_the_readme_says_how_to_resume_a_killed_workflow():
    """After SIGKILL or a lost node, Snakemake's lock and incomplete markers stay behind."""
    readme = (ROOT / "README.md").read_text()
    assert "SIGKILL" in readme
    for flag in ("--unlock", "--rerun-incomplete"):
        assert f"snakemake {flag}" in readme, flag
    process = subprocess.run([sys.executable, "-m", "snakemake", "--help"], capture_output=True, text=True)
    if process.returncode != 0:
        pytest.skip("Snakemake is not installed")
    assert "--unlock" in process.stdout and "--rerun-incomplete" in process.stdout


def test_phmmer_hits_of_latin1_queries_merge_as_phmmer(tmp_path, monkeypatch):
    """A hits file keeps a query's Latin-1 name: `gpuhmm merge` reads it back and writes
    phmmer's tables."""
    fasta = _latin1_fasta(tmp_path / "latin1.faa")
    queries = _latin1_fasta(tmp_path / "queries.faa", newline=b"\r\n")
    ours = _ours(tmp_path, monkeypatch)
    _gpuhmm("phmmer", "--cpu", "2", "-o", os.devnull, "--hits", "q.hits", queries, fasta)
    _gpuhmm("merge", *[word for kind in TABLES for word in (f"--{kind}", f"out.{kind}")], "q.hits")
    theirs = _reference("phmmer", tmp_path / "theirs", *_outputs(Path("."))[4:], queries, fasta)
    for kind in TABLES:
        assert _table_body(ours / f"out.{kind}") == _table_body(theirs / f"out.{kind}"), kind


def test_latin1_targets_given_as_pyhmmer_sequences_as_hmmsearch(tmp_path):
    """Digital sequences whose names pyhmmer cannot decode are searched as their file is."""
    import pyhmmer

    from gpuhmm import OutputFiles, hmmsearch

    fasta = _latin1_fasta(tmp_path / "latin1.faa")
    alphabet = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.easel.SequenceFile(fasta, digital=True, alphabet=alphabet) as handle:
        block = handle.read_block()
    ours = tmp_path / "ours"
    ours.mkdir()
    hmmsearch(TINY, block, outputs=OutputFiles(**{kind: ours / f"out.{kind}" for kind in TABLES}))
    theirs = _reference("hmmsearch", tmp_path / "theirs", *_outputs(Path("."))[4:], TINY, fasta)
    for kind in TABLES:
        assert _table_body(ours / f"out.{kind}") == _table_body(theirs / f"out.{kind}"), kind
