"""Shuffle significance (--shuffle N): the shuffles, the censored Gumbel fit, and the table,
deterministic for a seed and the same on the GPU as on the CPU reference."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os

import numpy as np
import pyhmmer
import pytest

import gpuhmm
from gpuhmm import shuffle
from gpuhmm.cli import main
from gpuhmm.db import database as seqdb
from gpuhmm.db import models
from gpuhmm.engine import vitcpu
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.engine.reference.vitfilter import viterbi_scores
from gpuhmm.stages import vitfilter

from helpers.cli import assert_golden_tables, golden_runs, run_gpuhmm, run_tables
from helpers.data import DATA


@pytest.mark.parametrize("mu,lam", [(10.0, 0.7), (-3.0, 1.2)])
def test_censored_fit_recovers_a_gumbel(mu, lam):
    scores = np.random.default_rng(11).gumbel(mu, 1 / lam, 20000)
    fitted_mu, fitted_lam = shuffle.fit_censored_gumbel(scores)
    assert abs(fitted_mu - mu) < 0.1 / lam and abs(fitted_lam - lam) / lam < 0.05
    assert shuffle.gumbel_pvalue(mu, mu, lam) == pytest.approx(1 - math.exp(-1))


def test_shuffles_keep_composition_and_follow_the_seed():
    codes = (np.arange(300) * 7 % 20).astype(np.uint8)
    drawn = shuffle.shuffles(codes, 8, 42, 3, 17)
    assert all((np.bincount(row, minlength=20) == np.bincount(codes, minlength=20)).all() for row in drawn)
    assert (drawn == shuffle.shuffles(codes, 8, 42, 3, 17)).all()
    assert (drawn != shuffle.shuffles(codes, 8, 43, 3, 17)).any()
    assert (drawn != shuffle.shuffles(codes, 8, 42, 3, 18)).any()


def _table(tmp_path, name, *options):
    out = tmp_path / f"{name}.tsv"
    status = main(
        [
            "search",
            "--cpu",
            "2",
            "--cut_ga",
            "--shuffle",
            "100",
            "--shuffle-out",
            str(out),
            "--tblout",
            str(tmp_path / f"{name}.tbl"),
            *options,
            str(DATA / "pfam-tiny.hmm"),
            str(DATA / "heldout.faa"),
        ]
    )
    assert status == 0
    return out.read_text().splitlines()


def test_table_is_deterministic_for_any_sharding_and_fits_viterbi_scores(tmp_path):
    one = _table(tmp_path, "one", "--db-shards", "1")
    assert one == _table(tmp_path, "three", "--db-shards", "3")
    reported = [
        line.split()[:3] for line in (tmp_path / "one.tbl").read_text().splitlines() if not line.startswith("#")
    ]
    header, rows = one[0].split("\t"), [line.split("\t") for line in one[1:]]
    assert [[row[0], row[1], row[2]] for row in rows] == reported
    for row in rows:
        fields = dict(zip(header, row))
        # Viterbi scores of random sequences are Gumbel with a slope near log 2 per bit.
        assert 0.4 < float(fields["gumbel_lambda"]) < 1.0
        assert 0.0 <= float(fields["empirical_P"]) < 1e-3  # every reported hit here is a real one


def test_shuffle_without_its_table_is_refused(tmp_path, capsys):
    status = main(
        [
            "search",
            "--shuffle",
            "100",
            "--tblout",
            str(tmp_path / "t"),
            str(DATA / "pfam-tiny.hmm"),
            str(DATA / "heldout.faa"),
        ]
    )
    assert status == 1 and "--shuffle: needs --shuffle-out" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


@pytest.mark.gpu
def test_gpu_table_equals_the_cpu_reference(tmp_path):
    assert _table(tmp_path, "gpu", "--backend", "gpu") == _table(tmp_path, "cpu", "--backend", "cpu")


@pytest.fixture
def fresh_compiler(tmp_path, monkeypatch):
    """The compiled Viterbi filter built afresh into a scratch cache, and forgotten afterwards."""
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "kernels"))
    vitcpu.compiled.cache_clear()
    yield monkeypatch
    vitcpu.compiled.cache_clear()


def _sample(names, rows=6):
    """(profile, sequences) pairs: each model against real targets of proteins.faa, several of
    them its own hits (whose scores overflow to +inf), each with `rows` − 1 shuffles of it."""
    hmms = [hmm for hmm in models.read_models(DATA / "pfam-test.h3m.gz") if hmm.name in names]
    profiles = vitfilter.viterbi_profiles(hmms, pyhmmer.plan7.Background(hmms[0].alphabet))
    with pyhmmer.easel.SequenceFile(str(DATA / "proteins.faa"), digital=True, alphabet=hmms[0].alphabet) as handle:
        block = handle.read_block()
    targets = [np.asarray(sequence.sequence, dtype=np.uint8) for sequence in block]
    position = {sequence.name: index for index, sequence in enumerate(block)}
    hits = gpuhmm.hmmsearch(
        DATA / "pfam-test.h3m.gz", DATA / "proteins.faa", engine=gpuhmm.EngineSettings(backend="cpu", cpus=1)
    )
    own = {model_hits.query.name: [position[hit.name] for hit in model_hits.reported] for model_hits in hits}
    pairs = []
    for profile in profiles:
        for index in own[profile.name][:2] + [5, 211]:
            codes = targets[index]
            pairs.append((profile, np.concatenate([codes[None], shuffle.shuffles(codes, rows - 1, 1, 0, index)])))
    return pairs


def _extreme(profile, generator):
    """`profile` with free or −inf D→D, M→D and D→M words, many B→M at −inf, and a D→D bound that
    runs the Lazy-F closure on every row: D paths then decide M cells, and every step of the
    closure's arithmetic shows in the scores."""
    twv = profile.twv.copy()
    Q = profile.Q
    words = {0: [-32768, 0], 3: [-32768, -300, 0, 0], 4: [-32768, -300, 0, 0]}  # BM, DM, MD
    transitions = twv[: 7 * Q].reshape(Q, 7, 8)
    for kind, values in words.items():
        chosen = generator.random((Q, 8)) < 0.5
        transitions[:, kind][chosen] = generator.choice(values, size=int(chosen.sum()))
    dd = twv[7 * Q :]
    chosen = generator.random(dd.shape) < 0.6
    dd[chosen] = generator.choice([-32768, -32000, -16384, -300, -1, 0, 0, 0], size=int(chosen.sum()))
    return dataclasses.replace(profile, twv=twv, ddbound_w=30000)


@pytest.fixture(scope="module")
def scored_sample():
    """Real and edge-case (profile, sequences) pairs with the numpy reference's scores."""
    pairs = _sample({"Fer4", "HTH_AraC", "Response_reg", "ABC_membrane"})
    generator = np.random.default_rng(5)
    pairs += [(_extreme(profile, generator), sequences) for profile, sequences in pairs[::3]]
    return [(profile, sequences, viterbi_scores(profile, list(sequences))) for profile, sequences in pairs]


@pytest.mark.parametrize("build", ["native", "portable"])
def test_compiled_viterbi_scores_equal_the_numpy_reference(fresh_compiler, scored_sample, build):
    if build == "portable":
        fresh_compiler.setenv("CC", "cc -DVITCPU_PORTABLE")  # the plain C lanes, as on other processors
    assert vitcpu.compiled() is not None
    for profile, sequences, reference in scored_sample:
        assert vitcpu.scores(profile, sequences).tobytes() == reference.tobytes()
    every = np.concatenate([reference for _, _, reference in scored_sample])
    assert np.isinf(every).any() and np.isfinite(every).any()  # overflows and finite scores both met


def test_without_a_compiler_the_numpy_reference_scores(fresh_compiler, caplog):
    fresh_compiler.setenv("CC", "no-such-compiler-for-gpuhmm")
    profile, sequences = _sample({"Fer4"}, rows=3)[0]
    gpuhmm_log = logging.getLogger("gpuhmm")
    gpuhmm_log.addHandler(caplog.handler)  # the CLI's own handler does not propagate
    try:
        assert vitcpu.scores(profile, sequences).tobytes() == viterbi_scores(profile, list(sequences)).tobytes()
    finally:
        gpuhmm_log.removeHandler(caplog.handler)
    assert "no C compiler" in caplog.text


def test_cpu_shuffles_of_the_bundled_data_run_with_progress_and_match_the_gpu_path(tmp_path, monkeypatch):
    out = tmp_path / "shuffles.tsv"
    models_file, sequences_file = DATA / "pfam-test.h3m.gz", DATA / "proteins.faa"
    arguments = ["--backend", "cpu", "--cpu", "2", "--shuffle", "200", "--shuffle-out", out, "-o", os.devnull]
    process = run_gpuhmm("search", *arguments, models_file, sequences_file)
    hits = gpuhmm.hmmsearch(models_file, sequences_file, engine=gpuhmm.EngineSettings(backend="cpu", cpus=1))
    reported = sum(len(model_hits.reported) for model_hits in hits)
    assert f"gpuhmm: shuffles: {reported}/{reported} hits, 100% of cells" in process.stderr
    table = out.read_text().splitlines()
    assert len(table) == reported + 1
    # The GPU path, the numpy model of its kernels standing in for the GPU, on the cheapest hits.
    cheapest = sorted((model_hits.query.M * hit.length, hit.name) for model_hits in hits for hit in model_hits.reported)
    chosen = {name for _, name in cheapest[:3]}
    subset = []
    for model_hits in hits:
        copy = model_hits.copy()
        for hit in copy.reported:
            hit.reported = hit.name in chosen
        subset.append(copy)
    monkeypatch.setattr(shuffle.STATE, "engine", ReferenceEngine)
    database = seqdb.makedb(sequences_file, None)
    try:
        rows = shuffle.significance(models.read_models(models_file), subset, database, 200, 42, "gpu")
    finally:
        seqdb.release(database)
    assert len(rows) >= 3
    assert {"\t".join(map(str, row)) for row in rows} <= set(table[1:])


def test_interrupted_shuffles_leave_the_other_outputs_whole(tmp_path, monkeypatch, capsys):
    """The tables, report and summary are written before the shuffles start; an interrupt during
    them (here after the first hit) leaves those whole and no shuffle table."""
    scored = []

    def interrupted(profile, sequences):
        if scored:
            raise KeyboardInterrupt
        scored.append(profile.name)
        return viterbi_scores(profile, list(sequences))

    monkeypatch.setattr(vitcpu, "scores", interrupted)
    report, summary, shuffled = tmp_path / "report.txt", tmp_path / "summary.json", tmp_path / "shuffles.tsv"
    spec = golden_runs()["tiny_proteins"]
    status, outputs = run_tables(
        tmp_path,
        "search",
        *["--backend", "cpu", "--cpu", "1", "--shuffle", "50", "--shuffle-out", shuffled],
        *["-o", report, "--summary", summary],
        DATA / spec["hmmfile"],
        DATA / spec["seqfile"],
    )
    assert status == 130 and scored
    assert "interrupted; every output but the shuffle table was written" in capsys.readouterr().err
    assert_golden_tables(outputs, "tiny_proteins.defaults", spec["cases"]["defaults"])
    assert report.read_text().endswith("[ok]\n")
    assert json.loads(summary.read_text())["models"]
    assert not shuffled.exists()
