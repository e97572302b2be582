"""gpuhmm.output's main report (`-o`) and `-A` alignments against hmmsearch, phmmer and hmmscan 3.4.

Each test runs the real binary and pyhmmer with the same options, writes the report from
pyhmmer's hits, and compares every line but the timing lines (and, where the header is not
rebuilt from the options, the header block); the `-A` files must be byte-identical. Each runs
twice: with HMMER's own writers of the hit lists (`output.native`), and with the restated ones
that write where those cannot be called.
"""

from __future__ import annotations

import io
import itertools
import subprocess

import pyhmmer
import pytest

from gpuhmm import GpuhmmError
from gpuhmm.hits import tophits
from gpuhmm.options import ReportSettings
from gpuhmm.output import native
from gpuhmm.output.alidisplay import write_alignments
from gpuhmm.output.report import ReportHeader, Stopwatch, write_report

from helpers.data import DATA, binary_models, header_block, hmmer_binary, report_body, without_timing

ALPHABET = pyhmmer.easel.Alphabet.amino()

#: Models chosen for their cases: unreported domains under --cut_ga (HisKA, HTH_AraC), no hits
#: (DUF6072 under -E), the inclusion threshold line (BPD_transp_1), 5-digit coordinates (HTH_3
#: in edge_giant_35k), domains at the model's ends (HAMP).
MODELS = ("BPD_transp_1", "DUF6072", "Fer4", "HAMP", "HisKA", "HTH_3", "HTH_AraC")

#: A line each case must show, to keep its purpose when the data changes.
SHOWN = {
    "defaults": "  ------ inclusion threshold ------\n",
    "cut_ga": "   [No individual domains that satisfy reporting thresholds (although complete target did)]\n",
    "thresholds": "   [No hits detected that satisfy reporting thresholds]\n",
}

#: (hmmsearch options, pyhmmer Pipeline options)
SEARCH_CASES = {
    "defaults": ((), {}),
    "noali": (("--noali",), {}),
    "acc": (("--acc",), {}),
    "notextw": (("--notextw",), {}),
    "textw": (("--textw", "150"), {}),
    "cut_ga": (("--cut_ga",), {"bit_cutoffs": "gathering"}),
    "thresholds": (("-E", "1e-20", "--domE", "1e-3"), {"E": 1e-20, "domE": 1e-3}),
    "narrow_E": (("-E", "1e-5"), {"E": 1e-5}),
    "acc_notextw_noali": (("--acc", "--notextw", "--noali"), {}),
}


@pytest.fixture(autouse=True, params=["native", "restated"])
def hit_list_writers(request, monkeypatch):
    """HMMER's writers of the hit lists, or (as where they cannot be called) the restated ones."""
    if request.param == "restated":
        monkeypatch.setattr(native, "_libraries", lambda: None)
    assert native.available() == (request.param == "native")


def settings_for(options):
    """The report settings that hmmsearch's command-line `options` ask for."""
    textw = 0 if "--notextw" in options else int(options[options.index("--textw") + 1]) if "--textw" in options else 120
    return ReportSettings(noali="--noali" in options, acc="--acc" in options, textw=textw)


def our_report(hits, settings, header, **keywords):
    handle = io.StringIO()
    write_report(handle, hits, settings, header, **keywords)
    return handle.getvalue()


def our_alignments(hits, program, textw, **keywords):
    handle = io.BytesIO()
    write_alignments(handle, hits, program, textw, **keywords)
    return handle.getvalue()


def run(program, *arguments, cwd):
    subprocess.run(
        [hmmer_binary(program), "--cpu", "1", *map(str, arguments)], check=True, cwd=cwd, capture_output=True
    )


def read_sequences(path):
    with pyhmmer.easel.SequenceFile(str(path), digital=True, alphabet=ALPHABET) as handle:
        return handle.read_block()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The chosen Pfam models, and a binary HMM file of them for the binaries."""
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        chosen = [hmm for hmm in handle if hmm.name in MODELS]
    return chosen, binary_models(chosen, tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def proteins():
    return read_sequences(DATA / "proteins.faa")


def assert_search_identical(tmp_path, hmm_path, hits, options):
    """Our report and -A file against hmmsearch's; returns our report and the settings."""
    run("hmmsearch", "-o", "out.txt", "-A", "ali.sto", *options, hmm_path, DATA / "proteins.faa", cwd=tmp_path)
    settings = settings_for(options)
    header = ReportHeader("hmmsearch", str(hmm_path), str(DATA / "proteins.faa"))
    ours = our_report(hits, settings, header, alignment_file="ali.sto")
    assert report_body(ours) == report_body((tmp_path / "out.txt").read_text())
    assert our_alignments(hits, "hmmsearch", settings.textw) == (tmp_path / "ali.sto").read_bytes()
    return ours, settings, header


@pytest.mark.parametrize("case", list(SEARCH_CASES))
def test_hmmsearch_report_identical(tmp_path, models, proteins, case):
    options, pipeline_options = SEARCH_CASES[case]
    hmms, path = models
    hits = [pyhmmer.plan7.Pipeline(ALPHABET, **pipeline_options).search_hmm(hmm, proteins) for hmm in hmms]
    ours, _, _ = assert_search_identical(tmp_path, path, hits, options)
    assert SHOWN.get(case, "") in ours


#: narrow_E's second shard starts at 938293.PRJEB85.HG003686_109 (file position 35), a weak
#: HTH_3 hit (P = 1.7e-6): a shard's pipeline keeps it (P x 1 <= 1e-5), one pipeline over the
#: file does not (P x 35 > 1e-5), and its name is the longest of the list.
@pytest.mark.parametrize("case,cuts", [("defaults", (140, 280)), ("cut_ga", (140, 280)), ("narrow_E", (34, 280))])
def test_hmmsearch_report_of_three_merged_shards(tmp_path, models, proteins, case, cuts):
    """Each model searched in three database shards, then merged: Z, domZ and the pipeline
    counts add up to one hmmsearch over the whole file; each shard keeps the hits hmmsearch
    --cpu 1 keeps (`tophits.as_hmmsearch_keeps`, given the targets' file positions), which
    sets the name column's width."""
    options, pipeline_options = SEARCH_CASES[case]
    hmms, path = models
    bounds = [0, *cuts, len(proteins)]
    shards = [proteins[start:end] for start, end in itertools.pairwise(bounds)]
    position = {}
    for number, sequence in enumerate(proteins, 1):
        position.setdefault(sequence.name, number)
    hits, unkept = [], []
    for hmm in hmms:
        found = [pyhmmer.plan7.Pipeline(ALPHABET, **pipeline_options).search_hmm(hmm, shard) for shard in shards]
        kept = [
            tophits.attached(tophits.as_hmmsearch_keeps(each, lambda hit: position[hit.name])[0], hmm) for each in found
        ]
        hits.append(kept[0].merge(*kept[1:]))
        unkept.append(found[0].merge(*found[1:]))
    ours, settings, header = assert_search_identical(tmp_path, path, hits, options)
    if case == "narrow_E":
        assert report_body(our_report(unkept, settings, header, alignment_file="ali.sto")) != report_body(ours)


def test_reference_and_structure_lines(tmp_path):
    """A hand-built model with RF, CS and MM lines and neither accession nor description:
    3.4 shows CS and RF above each alignment block, never MM."""
    (tmp_path / "small.sto").write_text(
        "# STOCKHOLM 1.0\n"
        "seq1 MKVLAAGIVGLLLAAQASAQWERTYKLPAS\n"
        "seq2 MKVLATGIVGLLIAAQASAEWERSYKLPAT\n"
        "seq3 MRVLAAGLVGLLLSAQTSAQWDRTYRLPAS\n"
        "#=GC RF xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"
        "#=GC MM ....mmmm......................\n"
        "#=GC SS_cons HHHHHHHHEEEEEEEE--------HHHHHH\n//\n"
    )
    subprocess.run(
        [hmmer_binary("hmmbuild"), "--hand", "small.hmm", "small.sto"], check=True, cwd=tmp_path, capture_output=True
    )
    with pyhmmer.plan7.HMMFile(tmp_path / "small.hmm") as handle:
        hmm = handle.read()
    assert hmm.reference and hmm.consensus_structure and hmm.accession is None and hmm.description is None
    (tmp_path / "targets.faa").write_text(
        ">t1 a long domain\nAAAAMKVLAAGIVGLLLAAQASAQWERTYKLPASAAA\n>t2\nMKVLATGIVGLLIAAQASAEGGGWERSYKLPAT\n"
    )
    targets = read_sequences(tmp_path / "targets.faa")
    hits = [pyhmmer.plan7.Pipeline(ALPHABET).search_hmm(hmm, targets)]
    for options in ((), ("--notextw",)):
        run("hmmsearch", "-o", "out.txt", "-A", "ali.sto", *options, "small.hmm", "targets.faa", cwd=tmp_path)
        settings = settings_for(options)
        ours = our_report(
            hits, settings, ReportHeader("hmmsearch", "small.hmm", "targets.faa"), alignment_file="ali.sto"
        )
        assert " RF\n" in ours and " CS\n" in ours and " MM\n" not in ours
        assert report_body(ours) == report_body((tmp_path / "out.txt").read_text())
        assert our_alignments(hits, "hmmsearch", settings.textw) == (tmp_path / "ali.sto").read_bytes()


@pytest.mark.parametrize("options,via_models", [((), False), (("--acc", "--notextw"), True)])
def test_phmmer_report_identical(tmp_path, options, via_models):
    """phmmer's queries are sequences: pyhmmer's search_seq, or models built as phmmer builds
    them (searched with search_hmm, the sequences passed as the queries)."""
    records = (DATA / "phmmer-queries.faa").read_text().split("\n>")
    (tmp_path / "queries.faa").write_text("\n>".join(records[:4]) + "\n")
    queries, targets = read_sequences(tmp_path / "queries.faa"), read_sequences(DATA / "heldout.faa")
    run("phmmer", "-o", "out.txt", "-A", "ali.sto", *options, "queries.faa", DATA / "heldout.faa", cwd=tmp_path)
    if via_models:
        builder = pyhmmer.plan7.Builder(ALPHABET, seed=42, popen=0.02, pextend=0.4, score_matrix="BLOSUM62")
        background = pyhmmer.plan7.Background(ALPHABET)
        built = [builder.build(query, background)[0] for query in queries]
        hits = [pyhmmer.plan7.Pipeline(ALPHABET).search_hmm(model, targets) for model in built]
        given = {"queries": queries}
    else:
        hits = [pyhmmer.plan7.Pipeline(ALPHABET).search_seq(query, targets) for query in queries]
        given = {}
    settings = settings_for(options)
    used = (("-o", "out.txt"), ("-A", "ali.sto"), *((flag, None) for flag in options), ("--cpu", 1))
    header = ReportHeader("phmmer", "queries.faa", str(DATA / "heldout.faa"), used)
    ours = our_report(hits, settings, header, alignment_file="ali.sto", **given)
    assert without_timing(ours) == without_timing((tmp_path / "out.txt").read_text())  # the header too
    assert our_alignments(hits, "phmmer", settings.textw, **given) == (tmp_path / "ali.sto").read_bytes()


@pytest.mark.parametrize(
    "options,pipeline_options",
    [((), {}), (("--acc", "--noali"), {}), (("--cut_ga", "--notextw"), {"bit_cutoffs": "gathering"})],
)
def test_hmmscan_report_identical(tmp_path, models, options, pipeline_options):
    """One TopHits per query sequence, the models as targets, from hmmpress'ed models."""
    hmms, _ = models
    with (tmp_path / "models.hmm").open("wb") as handle:
        for hmm in hmms:
            hmm.write(handle)
    subprocess.run([hmmer_binary("hmmpress"), "models.hmm"], check=True, cwd=tmp_path, capture_output=True)
    queries = read_sequences(DATA / "heldout.faa")
    run("hmmscan", "-o", "out.txt", *options, "models.hmm", DATA / "heldout.faa", cwd=tmp_path)
    hits = []
    for query in queries:
        with pyhmmer.plan7.HMMPressedFile(tmp_path / "models.hmm") as pressed:
            hits.append(pyhmmer.plan7.Pipeline(ALPHABET, **pipeline_options).scan_seq(query, pressed))
    used = (("-o", "out.txt"), *((flag, None) for flag in options), ("--cpu", 1))
    ours = our_report(
        hits, settings_for(options), ReportHeader("hmmscan", str(DATA / "heldout.faa"), "models.hmm", used)
    )
    assert "Domain annotation for each model" in ours
    assert without_timing(ours) == without_timing((tmp_path / "out.txt").read_text())  # the header too
    with pytest.raises(ValueError, match="no -A"):
        our_alignments(hits, "hmmscan", 120)


def test_header_block_identical(tmp_path, models, proteins):
    """With the options hmmsearch was given, the header is hmmsearch's but for the program's name."""
    hmms, path = models
    used = (("-A", "ali.sto"), ("--tblout", "t.tbl"), ("--acc", None), ("--noali", None))
    used += (("-E", "0.5"), ("--domE", 2), ("--incE", 0.001), ("--seed", 7))
    arguments = [str(word) for flag, value in used for word in (flag, value) if word is not None]
    run("hmmsearch", "-o", "out.txt", *arguments, path, DATA / "proteins.faa", cwd=tmp_path)
    # a Pipeline's counters add up over its searches: the statistics need one per model (or clear())
    hits = [
        pyhmmer.plan7.Pipeline(ALPHABET, E=0.5, domE=2, incE=0.001, seed=7).search_hmm(hmm, proteins) for hmm in hmms
    ]
    options = (("-o", "out.txt"), *used, ("--cpu", 1))
    header = ReportHeader("hmmsearch", str(path), str(DATA / "proteins.faa"), options, shown_as="gpuhmm")
    ours = our_report(hits, settings_for(("--acc", "--noali")), header, alignment_file="ali.sto")
    theirs = (tmp_path / "out.txt").read_text()
    assert header_block(ours)[0] == "# gpuhmm :: search profile(s) against a sequence database\n"
    assert header_block(ours)[1:] == header_block(theirs)[1:]
    assert report_body(ours) == report_body(theirs)
    with pytest.raises(ValueError, match="--cut_ga"):
        our_report(hits, ReportSettings(), ReportHeader("phmmer", "q", "t", (("--cut_ga", None),)))


def test_timing_lines(models, proteins):
    hmms, _ = models
    hits = [pyhmmer.plan7.Pipeline(ALPHABET).search_hmm(hmms[0], proteins)]
    header = ReportHeader("hmmsearch", "q", "t")
    lines = our_report(hits, ReportSettings(), header, times=[Stopwatch(3722.5, 0.75, 3723.25)]).splitlines()
    assert "# CPU time: 3722.50u 0.75s 01:02:03.25 Elapsed: 01:02:03.25" in lines
    nodes_residues = hmms[0].M * sum(len(sequence) for sequence in proteins)
    assert f"# Mc/sec: {nodes_residues / 3723.25e6:.2f}" in lines
    lines = our_report(hits, ReportSettings(), header).splitlines()
    assert "# CPU time: 0.00u 0.00s 00:00:00.00 Elapsed: 00:00:00.00" in lines and "# Mc/sec: 0.00" in lines
    with pytest.raises(GpuhmmError, match="at least 120"):
        ReportSettings(textw=80)
