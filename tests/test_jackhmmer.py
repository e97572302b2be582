"""`gpuhmm jackhmmer` against jackhmmer 3.4's golden outputs: every round of every query
searched by the sharded engine, the report (but its header block and timing lines), the
tables, the alignment and the checkpoint files as the binary wrote them
(tests/data/make_jackhmmer_goldens.py). Also AlphaFold 3's `--seq_limit`, the API against
pyhmmer's jackhmmer, and bad input."""

from __future__ import annotations

import json
import logging
import subprocess

import pyhmmer
import pytest
from pyhmmer.easel import Alphabet, SequenceFile

import gpuhmm
from gpuhmm import EngineSettings, JackhmmerOptions, placement, streamed
from gpuhmm.cli import main
from gpuhmm.db import plainfasta, stream
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.worker import STATE

from helpers.cli import run_gpuhmm
from helpers.data import DATA, GOLDEN, header_block, hmmer_binary, report_body, table_body

RUNS = json.loads((GOLDEN / "jackhmmer-runs.json").read_text())
PROTEINS = DATA / "proteins.faa"
QUERIES = DATA / "jackhmmer-queries.faa"
#: Sharded and threaded, so that each round goes through the merge of shards.
ENGINE = ["--cpu", "2", "--db-shards", "3"]


def _stem(case):
    return f"golden/jackhmmer.{case}"


def _run_case(tmp_path, monkeypatch, case, *engine):
    """`gpuhmm jackhmmer` on golden case `case` in tmp_path, its outputs named as the golden's
    (relative names: the report names the -A file); returns tmp_path."""
    spec = RUNS[case]
    stem = _stem(case)
    flags = {"out": "-o", "sto": "-A", "tblout": "--tblout", "domtblout": "--domtblout"}
    outputs = [word for kind in spec["outputs"] for word in (flags[kind], f"{stem}.{kind}")]
    if spec["checkpoints"]:
        outputs += ["--chkhmm", f"{stem}.chk", "--chkali", f"{stem}.chk"]
    (tmp_path / "golden").mkdir()
    monkeypatch.chdir(tmp_path)
    inputs = [DATA / spec["queryfile"], DATA / spec["seqfile"]]
    assert main(["jackhmmer", *spec["options"], *outputs, *engine, *map(str, inputs)]) == 0
    return tmp_path


def _without(text, prefixes):
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith(prefixes))


def _option_lines(report):
    """The header's option lines, less those naming the program, the inputs and the threads."""
    skipped = ("# jackhmmer ::", "# gpuhmm ::", "# query sequence file:", "# target sequence database:")
    return _without("".join(header_block(report)), (*skipped, "# number of worker threads:"))


def _assert_golden(produced, case):
    """Every output golden case `case` stores, as the binary wrote it."""
    spec = RUNS[case]
    stem = _stem(case)
    for kind in spec["outputs"]:
        ours, theirs = produced / f"{stem}.{kind}", GOLDEN / f"jackhmmer.{case}.{kind}"
        if kind in ("tblout", "domtblout"):
            assert table_body(ours) == table_body(theirs), f"{kind} differs"
        elif kind == "out":
            ours, theirs = ours.read_text("latin-1"), theirs.read_text("latin-1")
            assert report_body(ours) == report_body(theirs), "report differs"
            assert _option_lines(ours) == _option_lines(theirs)
        else:
            assert ours.read_bytes() == theirs.read_bytes(), f"{kind} differs"
    for number in range(1, spec["checkpoints"] + 1):
        model = (produced / f"{stem}.chk-{number}.hmm").read_text()
        assert _without(model, ("DATE ",)) == (GOLDEN / f"jackhmmer.{case}.chk-{number}.hmm").read_text()
        alignment = (produced / f"{stem}.chk-{number}.sto").read_bytes()
        assert alignment == (GOLDEN / f"jackhmmer.{case}.chk-{number}.sto").read_bytes()
    assert not (produced / f"{stem}.chk-{spec['checkpoints'] + 1}.hmm").exists()


@pytest.mark.parametrize("case", list(RUNS))
def test_jackhmmer_identical_to_jackhmmer(tmp_path, monkeypatch, case):
    _assert_golden(_run_case(tmp_path, monkeypatch, case, "--backend", "cpu", *ENGINE), case)


@pytest.mark.parametrize("case", list(RUNS))
def test_jackhmmer_streaming_its_database_identical_to_jackhmmer(tmp_path, monkeypatch, case):
    """Each round reads the file again in blocks of a few sequences (`streamed`), as the binary does."""
    monkeypatch.setattr(stream, "BLOCK_RESIDUES", 5000)
    rounds, search = [], streamed.search

    def counted(*arguments):
        rounds.append(arguments)
        return search(*arguments)

    monkeypatch.setattr(streamed, "search", counted)
    engine = ("--backend", "cpu", "--cpu", "2", "--shard-memory", "0.000001")
    _assert_golden(_run_case(tmp_path, monkeypatch, case, *engine), case)
    assert rounds


@pytest.mark.parametrize("case", list(RUNS))
def test_jackhmmer_reading_its_database_in_pieces_identical_to_jackhmmer(tmp_path, monkeypatch, case):
    """Each round reads the file again in pieces of plain FASTA of a few sequences
    (`streamed.search_pieces`), as the GPU does a file past its shard memory; forced here on the
    CPU backend."""
    monkeypatch.setattr(plainfasta, "PLAIN_CHUNK_BYTES", 2500)
    monkeypatch.setattr(stream, "chosen", lambda *arguments: "pieces")
    rounds, search = [], streamed.search_pieces

    def counted(*arguments):
        rounds.append(arguments)
        return search(*arguments)

    monkeypatch.setattr(streamed, "search_pieces", counted)
    engine = ("--backend", "cpu", "--cpu", "2", "--shard-memory", "0.0002")  # pieces of 25 KB
    _assert_golden(_run_case(tmp_path, monkeypatch, case, *engine), case)
    assert rounds


def test_jackhmmer_on_the_gpu_path_with_reference_engine(tmp_path, monkeypatch):
    """The GPU filters (their numpy reference) in every round, against the binary run here on
    heldout.faa, where each query goes on for 2 or 3 rounds."""
    jackhmmer = hmmer_binary("jackhmmer")
    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))
    monkeypatch.chdir(tmp_path)
    inputs = [str(QUERIES), str(DATA / "heldout.faa")]
    for name, program in (("ours", ["jackhmmer", "--backend", "gpu", *ENGINE]), ("theirs", [])):
        outputs = ["-N", "3", "-o", f"{name}.out", "-A", "out.sto", "--tblout", f"{name}.tbl"]
        if program:
            assert main([*program, *outputs, *inputs]) == 0
            (tmp_path / "out.sto").rename(tmp_path / "ours.sto")
        else:
            subprocess.run([jackhmmer, *outputs, *inputs], check=True, capture_output=True)
    assert table_body(tmp_path / "ours.tbl") == table_body(tmp_path / "theirs.tbl")
    assert (tmp_path / "ours.sto").read_bytes() == (tmp_path / "out.sto").read_bytes()
    ours, theirs = (report_body((tmp_path / f"{name}.out").read_text("latin-1")) for name in ("ours", "theirs"))
    assert ours == theirs and ours.count("@@ Round:") == 5


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["N3", "alphafold3"])
def test_jackhmmer_on_the_gpu(tmp_path, monkeypatch, case):
    _assert_golden(_run_case(tmp_path, monkeypatch, case, "--backend", "gpu", *ENGINE), case)


def _as_the_binary(tmp_path, monkeypatch, *words):
    """`gpuhmm jackhmmer WORDS` (two threads, three shards) and the binary on QUERIES against
    PROTEINS, each in its own folder: the tables, the report and its option lines alike.
    Returns our report."""
    jackhmmer = hmmer_binary("jackhmmer")
    inputs = [str(QUERIES), str(PROTEINS)]
    words = [*words, "-o", "out.txt", "--tblout", "out.tbl", "--domtblout", "out.dom"]
    for name in ("ours", "theirs"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        if name == "ours":
            assert main(["jackhmmer", *words, "--backend", "cpu", *ENGINE, *inputs]) == 0
        else:
            subprocess.run([jackhmmer, *words, *inputs], check=True, capture_output=True)
    for kind in ("tbl", "dom"):
        assert table_body(tmp_path / "ours" / f"out.{kind}") == table_body(tmp_path / "theirs" / f"out.{kind}"), kind
    ours, theirs = ((tmp_path / name / "out.txt").read_text("latin-1") for name in ("ours", "theirs"))
    assert report_body(ours) == report_body(theirs)
    assert _option_lines(ours) == _option_lines(theirs)
    return ours


@pytest.mark.parametrize("matrix", ["BLOSUM45", "BLOSUM80", "PAM30"])
def test_score_matrix_on_several_threads_as_jackhmmer(tmp_path, monkeypatch, matrix):
    """--mx builds every query's first model, also where the models are built on several
    threads: the tables and the report as the binary's with the same matrix."""
    _as_the_binary(tmp_path, monkeypatch, "-N", "2", "--mx", matrix)


def _rows(path):
    """Each query's table rows, split on whitespace, in order."""
    rows = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            fields = line.split()
            rows.setdefault(fields[2], []).append(fields)
    return rows


def test_seq_limit_keeps_the_first_hits_of_a_round(tmp_path, monkeypatch):
    """AlphaFold 3's patch cuts each round's ranked list to its first N hits (th->N): the
    tables hold the unlimited run's first N rows of each query, the alignment their domains."""
    limit = 5
    spec = RUNS["alphafold3"]
    monkeypatch.chdir(tmp_path)
    words = ["--tblout", "limited.tbl", "-A", "limited.sto", "-o", "limited.out", "--seq_limit", str(limit)]
    inputs = [str(DATA / spec["queryfile"]), str(DATA / spec["seqfile"])]
    assert main(["jackhmmer", *spec["options"], *words, "--backend", "cpu", *ENGINE, *inputs]) == 0
    whole, limited = _rows(GOLDEN / "jackhmmer.alphafold3.tblout"), _rows(tmp_path / "limited.tbl")
    assert list(limited) == list(whole)
    assert any(len(rows) > limit for rows in whole.values())
    for query, rows in whole.items():
        assert limited[query] == rows[:limit]
    kept = {row[0] for rows in limited.values() for row in rows}
    aligned = {
        line.split()[0].rsplit("/", 1)[0]
        for line in (tmp_path / "limited.sto").read_text().splitlines()
        if line and not line.startswith(("#", "//"))
    }
    assert aligned <= kept | set(limited)
    assert f"# set max sequence hits to return: {limit}\n" in (tmp_path / "limited.out").read_text()


def test_api_gives_what_pyhmmer_jackhmmer_gives():
    """gpuhmm.jackhmmer on pyhmmer's objects: per query the last round, as
    pyhmmer.hmmer.jackhmmer gives it (rounds, convergence, hits), and every round with
    checkpoints."""
    amino = Alphabet.amino()
    with SequenceFile(str(QUERIES), digital=True, alphabet=amino) as handle:
        queries = list(handle)
    with SequenceFile(str(PROTEINS), digital=True, alphabet=amino) as handle:
        targets = handle.read_block()
    engine = EngineSettings(backend="cpu", cpus=2, db_shards=3)
    settings = JackhmmerOptions(max_iterations=3)
    ours = list(gpuhmm.jackhmmer(queries, targets, engine=engine, settings=settings, checkpoints=True))
    theirs = list(pyhmmer.hmmer.jackhmmer(queries, targets, max_iterations=3, checkpoints=True, cpus=2))
    assert [len(rounds) for rounds in ours] == [len(rounds) for rounds in theirs] != [3, 3, 3]
    for our_rounds, their_rounds in zip(ours, theirs):
        for mine, peer in zip(our_rounds, their_rounds):
            assert (mine.iteration, mine.converged) == (peer.iteration, peer.converged)
            assert mine.hmm.name == peer.hmm.name
            assert [(hit.name, hit.score, hit.included) for hit in mine.hits] == [
                (hit.name, hit.score, hit.included) for hit in peer.hits
            ]
            assert len(mine.msa.sequences) == len(peer.msa.sequences)
    last = list(gpuhmm.jackhmmer(queries, targets, engine=engine, settings=settings))
    assert [result.iteration for result in last] == [rounds[-1].iteration for rounds in ours]


def test_progress_lines_name_the_round(caplog, monkeypatch):
    """Each round's progress lines open with its number, the first as its tasks start."""
    monkeypatch.setattr(logging.getLogger("gpuhmm"), "propagate", True)  # the CLI's handler stops it
    caplog.set_level(logging.INFO, logger="gpuhmm")
    engine = EngineSettings(backend="cpu", cpus=2)
    gpuhmm.jackhmmer(QUERIES, PROTEINS, engine=engine, settings=JackhmmerOptions(max_iterations=2))
    messages = dict.fromkeys(record.getMessage() for record in caplog.records)  # once, if caplog hears it twice
    lines = [message for message in messages if message.startswith("jackhmmer round")]
    assert [line.split(":")[0] for line in lines] == ["jackhmmer round 1"] * 2 + ["jackhmmer round 2"] * 2
    assert " 0/" in lines[0] and " 0/" in lines[2] and "100% of cells" in lines[1] and "100% of cells" in lines[3]


def test_empty_first_query_as_jackhmmer(tmp_path):
    """An empty first sequence is no query, but counts as the first: no table opens with the
    column header, as jackhmmer's nquery == 1 test leaves it."""
    jackhmmer = hmmer_binary("jackhmmer")
    queries = tmp_path / "queries.faa"
    queries.write_bytes(b">empty\n" + (DATA / "jackhmmer-short.faa").read_bytes())
    run_gpuhmm("jackhmmer", "-N", "2", "--tblout", "ours.tbl", "--backend", "cpu", queries, PROTEINS, cwd=tmp_path)
    subprocess.run([jackhmmer, "-N", "2", "-o", "/dev/null", "--tblout", "theirs.tbl", queries, PROTEINS],
                   cwd=tmp_path, check=True)  # fmt: skip
    assert table_body(tmp_path / "ours.tbl") == table_body(tmp_path / "theirs.tbl")
    assert "# target name" not in (tmp_path / "ours.tbl").read_text()


def _refused(tmp_path, *arguments, words=()):
    """`gpuhmm jackhmmer` exits 1 with one error line naming `words`, and writes nothing."""
    outputs = ["-A", "out.sto", "--tblout", "out.tbl", "-o", "out.txt", "--chkhmm", "chk"]
    before = sorted(tmp_path.iterdir())
    process = run_gpuhmm("jackhmmer", *outputs, *arguments, check=False, cwd=tmp_path)
    assert process.returncode == 1, process.stderr
    errors = [line for line in process.stderr.strip().splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in process.stderr, process.stderr
    for word in words:
        assert word in errors[0], errors[0]
    assert sorted(tmp_path.iterdir()) == before, "an output was left behind"


def test_missing_query_file(tmp_path):
    _refused(tmp_path, tmp_path / "nope.faa", PROTEINS, words=("nope.faa", "not found"))


def test_empty_query_file(tmp_path):
    empty = tmp_path / "empty.faa"
    empty.write_text("")
    _refused(tmp_path, empty, PROTEINS, words=("empty.faa", "empty"))


@pytest.mark.parametrize("command", ["jackhmmer", "phmmer"])
def test_queries_and_sequences_both_from_standard_input_is_one_line(tmp_path, command):
    process = run_gpuhmm(command, "-", "-", check=False, cwd=tmp_path)
    assert process.returncode == 1
    problem = "the queries and the sequences cannot both come from standard input"
    assert process.stderr == f"gpuhmm {command}: error: -: {problem}\n"


def test_missing_database(tmp_path):
    _refused(tmp_path, QUERIES, tmp_path / "nope.faa", words=("nope.faa", "not found"))


@pytest.mark.parametrize(
    "option, words",
    [
        (["-N", "0"], ("-N", "at least 1")),
        (["--seq_limit", "0"], ("--seq_limit", "at least 1")),
        (["--popen", "0.7"], ("--popen",)),
        (["--incE", "0"], ("--incE",)),
        (["--wid", "0.5"], ("--wid", "--wblosum")),
        (["--eid", "2", "--eclust"], ("--eid",)),
        (["--cut_ga"], ("--cut_ga",)),
        (["--mxfile", "m.txt"], ("--mxfile",)),
    ],
)
def test_bad_option(tmp_path, option, words):
    _refused(tmp_path, *option, QUERIES, PROTEINS, words=words)


@pytest.mark.parametrize(
    "words",
    [
        ["--eset", "0"],
        ["--eset", "-1"],
        ["--eset", "5", "--ere", "0.5"],
        ["--eset", "abc"],
        ["--eset", "5", "--eclust"],
        ["--eent", "--eset", "5"],
    ],
)
def test_eset_accepted_and_refused_as_jackhmmer(tmp_path, words):
    """jackhmmer's --eset takes any real number (its option has no range), but not with another
    effective sequence number scheme. One round: what is in question is the command line."""
    short = DATA / "jackhmmer-short.faa"
    theirs = subprocess.run([hmmer_binary("jackhmmer"), "-N", "1", *words, short, short], capture_output=True)
    if theirs.returncode == 0:
        run_gpuhmm("jackhmmer", "-N", "1", *words, short, short, cwd=tmp_path)
    else:
        _refused(tmp_path, *words, short, short, words=[word for word in words if word.startswith("--")])


@pytest.mark.parametrize("value", ["0", "-0"])
def test_eset_of_0_as_jackhmmer(tmp_path, monkeypatch, value):
    """--eset 0 weighs later rounds' alignments as jackhmmer does."""
    assert _as_the_binary(tmp_path, monkeypatch, "-N", "3", "--eset", value).count("@@ Round:") > 2


def test_an_eset_that_cannot_weigh_an_alignment_fails_in_round_2(tmp_path):
    """--eset -1 is accepted; jackhmmer aborts building round 2's model, gpuhmm says so in one line."""
    aborted = subprocess.run(
        [hmmer_binary("jackhmmer"), "-N", "2", "--eset", "-1", QUERIES, PROTEINS], capture_output=True
    )
    assert aborted.returncode != 0 and b"Fatal exception" in aborted.stderr
    _refused(tmp_path, "-N", "2", "--eset", "-1", QUERIES, PROTEINS, words=("round 2",))


def test_output_that_is_an_input_is_refused(tmp_path):
    queries = tmp_path / "queries.faa"
    queries.write_bytes(QUERIES.read_bytes())
    process = run_gpuhmm("jackhmmer", "-A", queries, queries, PROTEINS, check=False, cwd=tmp_path)
    assert process.returncode == 1 and "refusing to overwrite" in process.stderr
    assert queries.read_bytes() == QUERIES.read_bytes()


def test_checkpoint_into_a_missing_folder_leaves_no_output(tmp_path):
    outputs = ["-A", "out.sto", "--tblout", "out.tbl", "--chkali", "missing/chk"]
    process = run_gpuhmm("jackhmmer", *outputs, QUERIES, PROTEINS, check=False, cwd=tmp_path)
    assert process.returncode == 1 and "missing" in process.stderr
    assert not list(tmp_path.iterdir())


def test_a_model_easel_cannot_build_is_one_line(tmp_path):
    """--eentexp's root finder fails on one query's second alignment, where the binary aborts
    ("xl,xr do not bracket a root"): one line naming the query and the round, no output."""
    _refused(tmp_path, "--eentexp", QUERIES, PROTEINS, words=("HG003686_309", "round 2", "do not bracket a root"))


def test_an_output_jackhmmer_has_not_is_refused(tmp_path):
    outputs = gpuhmm.OutputFiles(pfamtblout=str(tmp_path / "pfam.tbl"))
    with pytest.raises(gpuhmm.GpuhmmError, match="--pfamtblout"):
        gpuhmm.jackhmmer(QUERIES, PROTEINS, outputs=outputs, engine=EngineSettings(backend="cpu"))
    assert not list(tmp_path.iterdir())
