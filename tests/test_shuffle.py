"""Shuffle significance (--shuffle N): the shuffles, the censored Gumbel fit, and the table,
deterministic for a seed and the same on the GPU as on the CPU reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuhmm import shuffle
from gpuhmm.cli import main

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
