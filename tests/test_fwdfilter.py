"""The Forward filter's float64 reference (engine.reference.fwdfilter.forward_scores, the GPU kernel's
oracle)
against HMMER's p7_ForwardParser as pyhmmer runs it, and the F3 decision with its margin."""

from __future__ import annotations

import math

import numpy as np
import pyhmmer
import pytest

from gpuhmm.engine.reference.fwdfilter import forward_scores
from gpuhmm.stages import fwdfilter, msvfilter

from helpers.filters import filter_profiles


def _hmmer_forward_scores(hmm, sequences):
    """By sequence name, HMMER's Forward-filter score (nats) and whether the hit's score is that
    score. With every filter open, null2 off and no reporting threshold, a hit's score is
    (fwdsc − null1)/ln 2, unless the sum of its domain scores was higher and took over
    (p7_Pipeline's "special case"), and then the two are equal. Names that occur twice are
    left out."""
    alphabet = hmm.alphabet
    pipeline = pyhmmer.plan7.Pipeline(
        alphabet, bias_filter=False, null2=False, F1=1.0, F2=1.0, F3=1.0, T=-1e9, domT=-1e9, Z=1
    )
    hits = pipeline.search_hmm(hmm, pyhmmer.easel.DigitalSequenceBlock(alphabet, sequences))
    names = [s.name for s in sequences]
    lengths = {s.name: len(s.sequence) for s in sequences}
    terms = msvfilter.LengthTerms.for_lengths(alphabet, list(lengths.values()))
    null1 = {name: float(terms.lookup(np.array([n]))[1][0]) for name, n in lengths.items()}
    return {
        hit.name: (hit.score * math.log(2.0) + null1[hit.name], hit.sum_score != hit.score)
        for hit in hits
        if names.count(hit.name) == 1
    }


@pytest.fixture(scope="module")
def forward_case(pfam_test_data):
    hmms, sequences = pfam_test_data
    picked = sorted(hmms, key=lambda h: h.M)[:: max(1, len(hmms) // 3)][:3]
    rng = np.random.default_rng(7)
    chosen = [sequences[i] for i in rng.choice(len(sequences), 120, replace=False)]
    return picked, chosen, filter_profiles(picked, pyhmmer.plan7.Background(picked[0].alphabet))[1]


def test_reference_equals_hmmer_forward(forward_case):
    hmms, sequences, profiles = forward_case
    for hmm, profile in zip(hmms, profiles):
        expected = _hmmer_forward_scores(hmm, sequences)
        ours = forward_scores(profile, [np.asarray(s.sequence, dtype=np.uint8) for s in sequences])
        exact = [(ours[i], expected[s.name][0]) for i, s in enumerate(sequences) if expected.get(s.name, (0, False))[1]]
        assert len(exact) >= 10, hmm.name
        error = np.abs(np.subtract(*zip(*exact)))
        # The score is a float32 of bits: it carries about 1e-7 relative, and the sums' order
        # differs from HMMER's; both are far inside the one-bit F3 margin.
        assert error.max() < 1e-4, (hmm.name, error.max())
        for i, s in enumerate(sequences):  # where the domain sum took over, it was the larger
            if s.name in expected:
                assert ours[i] <= expected[s.name][0] + 1e-4, (hmm.name, s.name)


def test_f3_decision_with_margin():
    tau, lam, F3 = -4.0, 0.69, 1e-5
    threshold_bits = tau - math.log(F3) / lam
    filter_scores = np.array([-10.0, -10.0, -10.0, -10.0, -10.0])
    margins = np.full(5, math.log(2.0))
    bits = np.array([threshold_bits + 0.01, threshold_bits - 0.99, threshold_bits - 1.01, tau - 50, np.nan])
    scores = bits * math.log(2.0) + filter_scores
    scores[4] = np.nan
    assert fwdfilter.passes_f3(scores, filter_scores, tau, lam, F3, margins).tolist() == [
        True,
        True,
        False,
        False,
        True,
    ]
    assert fwdfilter.passes_f3(scores[:3], filter_scores[:3], tau, lam, F3, 0.0).tolist() == [True, False, False]
