"""gpuhmm as a drop-in, round two: E-values below the smallest normal double, the width of
hmmscan's Model column, phmmer's own options and queries, and `--seed`'s header lines.

The references are the `hmmer` wheel's own binaries, run on inputs the tests cut from
tests/data.
"""

from __future__ import annotations

import gzip
import io
import subprocess

import pyhmmer
import pytest

from gpuhmm import placement
from gpuhmm.cli import main
from gpuhmm.db import fasta, models
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.worker import STATE

from helpers.cli import run_gpuhmm
from helpers.data import DATA, TABLES, header_block, hmmer_binary, report_body, table_body

#: A real protein of heldout.faa (4560 residues): its first 480 residues, as phmmer's query,
#: or the first 440, as an `hmmbuild --amino` model, find it with a P-value of about 1e-313,
#: which hmmsearch, phmmer and hmmscan print as E-value 0.
LONG = "938293.PRJEB85.HG003687_166"


def _record(path, name):
    """The FASTA record of `name` in `path`, as written there."""
    for record in path.read_text().split("\n>"):
        if record.lstrip(">").split(None, 1)[0] == name:
            return ">" + record.lstrip(">").rstrip("\n") + "\n"
    raise KeyError(name)


def _prefix(record, length, name):
    residues = "".join(record.splitlines()[1:])
    return f">{name}\n{residues[:length]}\n"


def _binary(program, cwd, *arguments):
    subprocess.run([hmmer_binary(program), *map(str, arguments)], check=True, cwd=cwd, capture_output=True)


def _outputs(directory):
    """The report and the three tables, written into `directory`."""
    return ["-o", directory / "report.txt", *[word for kind in TABLES for word in (f"--{kind}", directory / kind)]]


def _compare(tmp_path, program, command, *arguments, backend="cpu"):
    """`program --cpu 1 ARGUMENTS` and `gpuhmm COMMAND ARGUMENTS`: the same tables and report."""
    theirs, ours = tmp_path / f"{command}-theirs", tmp_path / f"{command}-ours"
    theirs.mkdir()
    ours.mkdir()
    _binary(program, tmp_path, "--cpu", 1, *_outputs(theirs), *arguments)
    assert main([command, "--cpu", "1", "--backend", backend, *map(str, [*_outputs(ours), *arguments])]) == 0
    for kind in TABLES:
        assert table_body(ours / kind) == table_body(theirs / kind), kind
    assert report_body((ours / "report.txt").read_text()) == report_body((theirs / "report.txt").read_text())
    return (ours / "tblout").read_text()


# 1. E-values under DBL_MIN: the binaries run with flush-to-zero and print 0.


@pytest.fixture
def long_protein(tmp_path):
    """The long protein, and the model `hmmbuild --amino` builds from its first 440 residues."""
    target = tmp_path / "long.faa"
    target.write_text(_record(DATA / "heldout.faa", LONG))
    (tmp_path / "q440.faa").write_text(_prefix(target.read_text(), 440, "q440"))
    _binary("hmmbuild", tmp_path, "--amino", "q440.hmm", "q440.faa")
    return target, tmp_path / "q440.hmm"


def test_phmmer_prints_an_underflowing_evalue_as_0(tmp_path, long_protein):
    target, _ = long_protein
    query = tmp_path / "q480.faa"
    query.write_text(_prefix(target.read_text(), 480, "q480"))
    row = _compare(tmp_path, "phmmer", "phmmer", query, target).splitlines()[3].split()
    assert row[4] == row[7] == "0"  # the full sequence's and the best domain's E-values


@pytest.mark.parametrize("options", [(), ("-Z", "1e6")])
def test_hmmsearch_prints_an_underflowing_evalue_as_0(tmp_path, long_protein, options):
    """With -Z 1e6, exp(lnP) · Z is a normal double, but exp(lnP) is not: still 0."""
    target, model = long_protein
    row = _compare(tmp_path, "hmmsearch", "search", *options, model, target).splitlines()[3].split()
    assert row[4] == row[7] == "0"


def test_hmmscan_prints_an_underflowing_evalue_as_0(tmp_path, long_protein):
    target, model = long_protein
    _binary("hmmpress", tmp_path, model)
    row = _compare(tmp_path, "hmmscan", "scan", model, target).splitlines()[3].split()
    assert row[4] == row[7] == "0"


# 2. hmmscan's Model column: as wide as every hit kept under the models counted so far.


@pytest.mark.parametrize("backend", ["cpu", "gpu"])
@pytest.mark.parametrize("options", [("-E", "1e-5"), ("--max", "-E", "1e-5")])
def test_scan_model_column_counts_the_hits_kept_before_the_last_model(tmp_path, monkeypatch, backend, options):
    """HATPase_c, the 13th of 26 models, is kept under Z = 13 but not reported under Z = 26:
    hmmscan's Model column is 9 wide, not 8. On the GPU path (the filters' numpy model), each
    sequence meets only its candidate models."""
    if backend == "gpu":
        monkeypatch.setattr(placement, "gpu_problem", lambda: None)
        monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))
    pressed = tmp_path / "models.hmm"
    pressed.write_bytes(gzip.decompress((DATA / "pfam-test.h3m.gz").read_bytes()))
    _binary("hmmpress", tmp_path, pressed)
    queries = tmp_path / "queries.faa"
    queries.write_text(_record(DATA / "proteins.faa", "emit_HATPase_c_1"))
    _compare(tmp_path, "hmmscan", "scan", *options, pressed, queries, backend=backend)
    assert "  Model     Description\n" in (tmp_path / "scan-ours" / "report.txt").read_text()


# 3. phmmer: its queries are protein, and its own options.


def test_phmmer_searches_a_first_query_of_acgt_as_protein(tmp_path):
    queries = tmp_path / "queries.faa"
    records = (DATA / "phmmer-queries.faa").read_text().split("\n>")[:2]
    queries.write_text(">linker\nACGTAGCTAGGACTAGCATCGATCGATGCA\n" + "\n>".join(records).rstrip("\n") + "\n")
    _compare(tmp_path, "phmmer", "phmmer", queries, DATA / "heldout.faa")


#: phmmer's own options, none at its default.
PHMMER = dict(popen=0.03, pextend=0.5, mx="BLOSUM80", EmL=100, EmN=150, EvL=120, EvN=160, EfL=80, EfN=170, Eft=0.05)
PHMMER_OPTIONS = [word for name, value in PHMMER.items() for word in (f"--{name}", str(value))]


def test_phmmer_options_identical_to_phmmer(tmp_path):
    """The rows, the report and its header lines for phmmer's options."""
    queries = tmp_path / "queries.faa"
    queries.write_text("\n>".join((DATA / "phmmer-queries.faa").read_text().split("\n>")[:3]).rstrip("\n") + "\n")
    arguments = ["--cpu", "1", *PHMMER_OPTIONS, "--qformat", "fasta", "-o", "report.txt", "--tblout", "tblout"]
    arguments += [queries, DATA / "heldout.faa"]
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    theirs.mkdir()
    ours.mkdir()
    _binary("phmmer", theirs, *arguments)
    run_gpuhmm("phmmer", *arguments, cwd=ours)
    assert table_body(ours / "tblout") == table_body(theirs / "tblout")
    ours, theirs = (ours / "report.txt").read_text(), (theirs / "report.txt").read_text()
    assert report_body(ours) == report_body(theirs)
    threads = "# number of worker threads:"
    assert header_block(ours)[1:] == [line for line in header_block(theirs)[1:] if not line.startswith(threads)]
    assert "# subst score matrix (built-in):   BLOSUM80\n" in header_block(ours)


def test_phmmer_calibration_options_reach_the_builder(tmp_path):
    """Each option sets its own part of the model: the same model, E-value parameters included,
    as `hmmbuild --singlemx` builds with the same options through HMMER's single-sequence builder."""
    from gpuhmm.options import PhmmerOptions

    query = tmp_path / "query.faa"
    query.write_text((DATA / "phmmer-queries.faa").read_text().split("\n>")[0].rstrip("\n") + "\n")
    _binary("hmmbuild", tmp_path, "--amino", "--singlemx", *PHMMER_OPTIONS, "theirs.hmm", query)
    (model,) = models.single_sequence_models(fasta.read_sequences(query, "amino"), 42, PhmmerOptions(**PHMMER))
    written = io.BytesIO()
    model.write(written)

    def body(text):  # from the E-value parameters on: no date, command or effective number
        lines = text.splitlines()
        return lines[next(index for index, line in enumerate(lines) if line.startswith("STATS")) :]

    assert body(written.getvalue().decode()) == body((tmp_path / "theirs.hmm").read_text())


@pytest.mark.parametrize(
    "arguments, words",
    [
        (["--popen", "0.5"], ["--popen", "0 <= x < 0.5"]),
        (["--pextend", "1"], ["--pextend", "0 <= x < 1"]),
        (["--EmL", "0"], ["--EmL", "at least 1"]),
        (["--Eft", "1"], ["--Eft", "0 < x < 1"]),
        (["--mx", "BLOSUM100"], ["--mx", "no matrix named BLOSUM100"]),
        (["--mx", "BLOSUM62", "--mxfile", "m.mx"], ["--mxfile", "not allowed with argument --mx"]),
        (["--qformat", "embl"], ["phmmer-queries.faa", "not a readable embl file"]),
    ],
)
def test_phmmer_refuses_what_phmmer_refuses_in_one_line(tmp_path, arguments, words):
    queries = DATA / "phmmer-queries.faa"
    refused = subprocess.run([hmmer_binary("phmmer"), *arguments, queries, queries], capture_output=True)
    assert refused.returncode != 0
    process = run_gpuhmm("phmmer", *arguments, "--tblout", tmp_path / "t", queries, queries, check=False)
    lines = process.stderr.strip().splitlines()
    assert process.returncode == 1 and len(lines) == 1, process.stderr
    assert lines[0].startswith("gpuhmm phmmer: error: ") and all(word in lines[0] for word in words), lines[0]
    assert not (tmp_path / "t").exists()


# 4. --seed's header lines.


@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("program", ["hmmsearch", "phmmer", "hmmscan", "jackhmmer"])
def test_seed_lines_as_each_program_prints_them(tmp_path, monkeypatch, program, seed):
    """`--seed` in each program's header: for 0, "one-time arbitrary" and then, as HMMER 3.4's
    output_header() falls through to it, "set to: 0"."""
    queries = DATA / "jackhmmer-short.faa"
    if program == "hmmscan":
        pressed = tmp_path / "tiny.hmm"
        pressed.write_bytes((DATA / "pfam-tiny.hmm").read_bytes())
        _binary("hmmpress", tmp_path, pressed)
        inputs = [pressed, queries]
    else:
        inputs = [DATA / "pfam-tiny.hmm" if program == "hmmsearch" else queries, queries]
    arguments = ["--seed", str(seed), "-o", "out.txt", *(["-N", "1"] if program == "jackhmmer" else [])]
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    theirs.mkdir()
    ours.mkdir()
    _binary(program, theirs, *arguments, *inputs)
    monkeypatch.chdir(ours)
    command = {"hmmsearch": "search", "hmmscan": "scan"}.get(program, program)
    assert main([command, "--backend", "cpu", *arguments, *map(str, inputs)]) == 0
    ours, theirs = (ours / "out.txt").read_text(), (theirs / "out.txt").read_text()
    assert header_block(ours)[1:] == header_block(theirs)[1:]
    assert f"# random number seed set to:       {seed}\n" in ours


# 5. The filters' thresholds: any number, as HMMER's. Its binaries flush P-values under DBL_MIN
# to 0, which a threshold of 0 passes.


def _reference_engine(monkeypatch, backend):
    """On the GPU path, the filters' numpy model."""
    if backend == "gpu":
        monkeypatch.setattr(placement, "gpu_problem", lambda: None)
        monkeypatch.setattr(STATE, "gpu_engine", ReferenceEngine(90, warps=8))


#: The GPU path's ids do not say "gpu", which would skip them where there is no GPU.
BACKENDS = pytest.mark.parametrize("backend", ["cpu", "gpu"], ids=["cpu", "gpu-path"])


@BACKENDS
@pytest.mark.parametrize(
    "options", [("--F1", "0"), ("--F2", "0"), ("--F3", "0"), ("--F1", "-1"), ("--F1", "5"), ("--F2", "inf")]
)
def test_filter_thresholds_of_any_value_as_hmmsearch(tmp_path, monkeypatch, backend, options):
    """--F1 0 passes only the sequences whose MSV score overflows (P = 0), --F1 -1 none of them,
    and --F1 5 is 1, as the report's statistics say, as is --F2 inf."""
    _reference_engine(monkeypatch, backend)
    _compare(tmp_path, "hmmsearch", "search", *options, DATA / "pfam-tiny.hmm", DATA / "heldout.faa", backend=backend)


@BACKENDS
def test_forward_threshold_0_passes_a_pvalue_flushed_to_0(tmp_path, monkeypatch, backend):
    """A protein's first 460 residues against themselves: a Forward P-value of about 1e-310,
    subnormal, which phmmer flushes to 0 and so passes --F3 0."""
    _reference_engine(monkeypatch, backend)
    query = tmp_path / "q460.faa"
    query.write_text(_prefix(_record(DATA / "proteins.faa", "emit_PEPcase_4"), 460, "q460"))
    rows = [line for line in _compare(tmp_path, "phmmer", "phmmer", "--F3", "0", query, query).splitlines()]
    assert len([row for row in rows if not row.startswith("#")]) == 1


# 5. hmmscan --cut_ga: a model without GA stops the scan only once it passes a sequence's MSV
# and bias filters (p7_pli_NewModelThresholds runs there).

#: A protein that passes HTH_AraC's MSV and bias filters, not its Viterbi filter.
STOPPED = "938293.PRJEB85.HG003685_403"


@BACKENDS
@pytest.mark.parametrize(
    "query, options, stops",
    [("emit_Fer4_2", (), False), (STOPPED, (), True), ("emit_Fer4_2", ("--max",), True)],
)
def test_scan_cut_ga_stops_where_hmmscan_does(tmp_path, monkeypatch, capsys, backend, query, options, stops):
    """HTH_AraC without GA: a Fer4 sequence never passes its MSV filter, unless --max passes all."""
    _reference_engine(monkeypatch, backend)
    with pyhmmer.plan7.HMMFile(DATA / "pfam-tiny.hmm") as handle:
        hmms = list(handle)
    hmms[1].cutoffs.gathering = None
    pressed = tmp_path / "noga.hmm"
    with pressed.open("wb") as handle:
        for hmm in hmms:
            hmm.write(handle)
    _binary("hmmpress", tmp_path, pressed)
    queries = tmp_path / "query.faa"
    queries.write_text(_record(DATA / "proteins.faa", query))
    arguments = ["--cut_ga", *options, pressed, queries]
    if not stops:
        _compare(tmp_path, "hmmscan", "scan", *arguments, backend=backend)
        return
    theirs = subprocess.run([hmmer_binary("hmmscan"), *map(str, arguments)], capture_output=True, text=True)
    assert theirs.returncode == 1 and "GA bit thresholds unavailable on model HTH_AraC" in theirs.stderr
    ours = tmp_path / "ours"
    ours.mkdir()
    assert main(["scan", "--backend", backend, *map(str, [*_outputs(ours), *arguments])]) == 1
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"gpuhmm scan: error: {pressed}: model 'HTH_AraC' has no gathering cutoffs"), error
    assert not any(ours.iterdir())
