"""The report and the three tables as `output.tables.write_outputs` writes them, formatted by
threads a run of models each (`output.parallel`), against hmmsearch 3.4 run on the same models.

HMMER's own writers (`output.native`) and the Python ones where those cannot be called must
both give hmmsearch's bytes, every model in file order, models without hits included.
"""

from __future__ import annotations

import subprocess

import pyhmmer
import pytest

from gpuhmm.options import ReportSettings
from gpuhmm.output import native, parallel, tables
from gpuhmm.output.report import Report, ReportHeader

from helpers.data import DATA, TABLES, binary_models, hmmer_binary, report_body, table_body

ALPHABET = pyhmmer.easel.Alphabet.amino()

#: (hmmsearch options, pyhmmer Pipeline options, report settings). Under the thresholds case
#: most models keep no hit at all.
CASES = {
    "defaults": ((), {}, ReportSettings()),
    "thresholds": (("-E", "1e-20", "--domE", "1e-3"), {"E": 1e-20, "domE": 1e-3}, ReportSettings()),
    "acc_notextw": (("--acc", "--notextw"), {}, ReportSettings(acc=True, textw=0)),
    "noali": (("--noali",), {}, ReportSettings(noali=True)),
}

#: A model without hits under "thresholds", moved first: the tables' header comes with it.
FIRST = "CBS"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Every model of the test file, FIRST first, and a binary HMM file of them in that order."""
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        hmms = list(handle)
    hmms.sort(key=lambda hmm: hmm.name != FIRST)
    return hmms, binary_models(hmms, tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def proteins():
    with pyhmmer.easel.SequenceFile(str(DATA / "proteins.faa"), digital=True, alphabet=ALPHABET) as handle:
        return handle.read_block()


@pytest.fixture(scope="module")
def hmmsearch(models, tmp_path_factory):
    """hmmsearch's report and tables for each case, by output name."""
    _, path = models
    found = {}
    for case, (options, _, _) in CASES.items():
        directory = tmp_path_factory.mktemp(case)
        outputs = ("-o", "output", *(word for table in TABLES for word in (f"--{table}", table)))
        command = [hmmer_binary("hmmsearch"), "--cpu", "1", *outputs, *options, path, DATA / "proteins.faa"]
        subprocess.run(command, check=True, cwd=directory, capture_output=True)
        found[case] = directory
    return found


def search(hmms, proteins, case):
    _, pipeline_options, _ = CASES[case]
    return [pyhmmer.plan7.Pipeline(ALPHABET, **pipeline_options).search_hmm(hmm, proteins) for hmm in hmms]


def written(directory, hits, case, models_path):
    """write_outputs' report and three tables of `hits` in `directory`, by output name."""
    report = Report(ReportHeader("hmmsearch", str(models_path), str(DATA / "proteins.faa")), CASES[case][2])
    paths = {name: directory / name for name in ("output", *TABLES)}
    footers = tables.hmmer_footers("gpuhmm search", models_path, DATA / "proteins.faa")
    tables.write_outputs(hits, paths, footers, report=report)
    return paths


def assert_hmmsearch_bytes(paths, expected):
    for table in TABLES:
        assert table_body(paths[table]) == table_body(expected / table), table
    assert report_body(paths["output"].read_text(encoding="latin-1")) == report_body(
        (expected / "output").read_text(encoding="latin-1")
    )


@pytest.fixture(params=[1, 3], ids=["1 thread", "3 threads"])
def threads(request, monkeypatch):
    """Runs of several models each: one run per thread."""
    monkeypatch.setattr(parallel, "available_cpus", lambda: request.param)
    monkeypatch.setattr(parallel, "RUNS_PER_THREAD", 1)
    return request.param


@pytest.mark.parametrize("case", list(CASES))
def test_threads_write_hmmsearch_bytes(tmp_path, models, proteins, hmmsearch, threads, case):
    hmms, path = models
    hits = search(hmms, proteins, case)
    assert native.available() and all(native.located(found) for found in hits)
    if case == "thresholds":
        assert not hits[0] and sum(not found for found in hits) > 1
    assert_hmmsearch_bytes(written(tmp_path, hits, case, path), hmmsearch[case])


@pytest.mark.parametrize("case", ["defaults", "thresholds"])
def test_python_writers_write_the_same_bytes(tmp_path, monkeypatch, models, proteins, hmmsearch, case):
    """Where HMMER's writers cannot be called, pyhmmer's and the restated report write instead."""
    hmms, path = models
    monkeypatch.setattr(native, "_libraries", lambda: None)
    assert not native.available()
    assert_hmmsearch_bytes(written(tmp_path, search(hmms, proteins, case), case, path), hmmsearch[case])


def test_models_out_of_order_differ(tmp_path, models, proteins, hmmsearch, threads):
    """The comparison catches a run written out of place: the same hits, two models swapped."""
    hmms, path = models
    hits = search(hmms, proteins, "defaults")
    hits[1], hits[2] = hits[2], hits[1]
    paths = written(tmp_path, hits, "defaults", path)
    for table in ("tblout", "domtblout"):
        assert table_body(paths[table]) != table_body(hmmsearch["defaults"] / table)


@pytest.mark.parametrize("sizes", [[], [0], [5, 0, 0, 7, 1], [100, 1, 1, 1, 1, 1, 1, 1, 1, 100], [3] * 40])
@pytest.mark.parametrize("count", [1, 2, 7, 64])
def test_runs_cover_every_query_once_in_order(sizes, count):
    """Runs of about equal work: none more than a share and one query over it."""
    runs = parallel.runs([range(size) for size in sizes], count)  # runs() reads only the hits' counts
    assert [index for run in runs for index in run] == list(range(len(sizes)))
    assert all(runs) and len(runs) <= count
    weights = [size + 1 for size in sizes]
    for run in runs:
        assert sum(weights[index] for index in run) <= sum(weights) / count + max(weights)


def test_located_only_for_a_tophits(models, proteins):
    hmms, _ = models
    found = pyhmmer.plan7.Pipeline(ALPHABET).search_hmm(hmms[1], proteins)
    tophits, pipeline = native.located(found)
    assert tophits and (pipeline.Z, pipeline.nseqs, pipeline.nnodes) == (found.Z, len(proteins), hmms[1].M)
    assert native.located(found.copy()) is not None
    assert native.located(object()) is None


#: A protein of heldout.faa (4560 residues) that a model of its first 440 residues finds with a
#: P-value of about 1e-313, which hmmsearch prints as E-value 0.
LONG = "938293.PRJEB85.HG003687_166"


def test_underflowing_best_hit_before_ordinary_ones(tmp_path):
    """The best hit's E-values print as 0 and the rest as they are: `hits.underflow.as_printed`
    stops at the first hit well clear of underflow, the ranked list's P-values only growing."""
    records = {record.split(None, 1)[0]: record for record in (DATA / "heldout.faa").read_text().split(">")[1:]}
    residues = "".join(records[LONG].splitlines()[1:])
    (tmp_path / "q440.faa").write_text(f">q440\n{residues[:440]}\n")
    subprocess.run(
        [hmmer_binary("hmmbuild"), "--amino", "q440.hmm", "q440.faa"], check=True, cwd=tmp_path, capture_output=True
    )
    # the protein, then pieces of the model's part of it: ever weaker hits, none near underflow
    pieces = [residues[start : start + 150] for start in (0, 150, 290)]
    (tmp_path / "targets.faa").write_text(
        f">{LONG}\n{residues}\n" + "".join(f">piece{index}\n{piece}\n" for index, piece in enumerate(pieces))
    )
    with pyhmmer.plan7.HMMFile(tmp_path / "q440.hmm") as handle:
        hmm = handle.read()
    with pyhmmer.easel.SequenceFile(str(tmp_path / "targets.faa"), digital=True, alphabet=ALPHABET) as handle:
        found = pyhmmer.plan7.Pipeline(ALPHABET).search_hmm(hmm, handle.read_block())
    assert len(found) == 4 and found[0].pvalue < 2.3e-308 < 4 * 2.3e-308 < found[1].pvalue
    outputs = tmp_path / "hmmsearch"
    outputs.mkdir()
    command = [hmmer_binary("hmmsearch"), "--cpu", "1", "-o", "output"]
    command += [word for table in TABLES for word in (f"--{table}", table)]
    command += [tmp_path / "q440.hmm", tmp_path / "targets.faa"]
    subprocess.run(command, check=True, cwd=outputs, capture_output=True)
    paths = {name: tmp_path / name for name in ("output", *TABLES)}
    report = Report(ReportHeader("hmmsearch", "q440.hmm", "targets.faa"), ReportSettings())
    tables.write_outputs([found], paths, tables.hmmer_footers("gpuhmm search", "q", "t"), report=report)
    assert_hmmsearch_bytes(paths, outputs)
    rows = [line.split() for line in table_body(paths["tblout"]).splitlines() if not line.startswith("#")]
    assert [row[4] == "0" for row in rows] == [True, False, False, False]
