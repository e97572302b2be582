"""The GPU bias filter's host preparation (stages/biasfilter.py) against
engine.reference.biasfilter.bias_scores.

The kernel (kernels/bias.cu) is emulated here in numpy, all pairs in lock step, with the same
float32 operations in the same order; numpy's double log stands in for CUDA's, and the same
float32-rounding-boundary test flags pairs for the host to rescore. With the prepared arrays the
result must equal `p7_bg_FilterScore`'s numpy model bit for bit.
"""

from __future__ import annotations

import numpy as np
import pyhmmer
import pytest

from gpuhmm.engine import filters
from gpuhmm.engine.reference.biasfilter import bias_scores
from gpuhmm.stages import biasfilter, vitfilter

START = np.array([0.999, 0.001], dtype=np.float32)


def _rounded_log(values, unsure):
    """bias.cu rounded_log: float32(log(double)), flagging logs near a float32 boundary."""
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.log(values.astype(np.float64))
        tol = np.abs(d) * 2.0**-49
        unsure |= ~((d - tol).astype(np.float32) == (d + tol).astype(np.float32))
        return d.astype(np.float32)


def emulate_kernel(sequences, pair_model, pair_sequence, odds, leave1, stay1, p1, length_term, tail_term):
    """bias.cu's per-pair loop for every pair at once: (scores float32, uncertain bool)."""
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)[pair_sequence]
    n = len(pair_model)
    codes = np.zeros((n, max(1, int(lengths.max(initial=0)))), dtype=np.intp)
    for pair, s in enumerate(pair_sequence):
        codes[pair, : lengths[pair]] = sequences[s]
    to_null = p1[pair_sequence]
    to_composition = np.float32(1.0) - to_null
    leave, stay = leave1[pair_model], stay1[pair_model]
    dp0 = np.zeros(n, np.float32)
    dp1 = np.zeros(n, np.float32)
    total = np.zeros(n, np.float32)
    unsure = np.zeros(n, bool)
    for i in range(int(lengths.max(initial=0))):
        live = lengths > i
        e = odds[pair_model[live], codes[live, i]]  # (live, 2)
        if i == 0:
            dp0[live], dp1[live] = e[:, 0] * START[0], e[:, 1] * START[1]
        else:
            a0, a1 = dp0[live], dp1[live]
            dp0[live] = (a0 * to_null[live] + a1 * leave[live]) * e[:, 0]
            dp1[live] = (a0 * to_composition[live] + a1 * stay[live]) * e[:, 1]
        a0, a1 = dp0[live], dp1[live]
        second = a1 > a0  # the peak's own cell becomes 1 (x/x), the other one is divided
        peak = np.where(second, a1, a0)
        with np.errstate(divide="ignore", invalid="ignore"):
            dp0[live] = np.where(second, a0 / peak, np.float32(1.0))
            dp1[live] = np.where(second, np.float32(1.0), a1 / peak)
        flags = unsure[live]
        total[live] += _rounded_log(peak, flags)
        unsure[live] = flags
    nonempty = lengths > 0
    flags = unsure[nonempty]
    total[nonempty] += _rounded_log(dp0[nonempty] + dp1[nonempty], flags)
    unsure[nonempty] = flags
    scores = (total + length_term[pair_sequence]) + tail_term[pair_sequence]
    scores[~nonempty] = 0.0
    unsure[~nonempty] = False
    return scores.astype(np.float32), unsure


def test_prepared_terms_reproduce_bias_scores(pfam_test_data):
    """Prep arrays + emulated kernel == bias_scores, for real models and proteins, degenerate codes and L = 0."""
    hmms, proteins = pfam_test_data
    background = pyhmmer.plan7.Background(hmms[0].alphabet)
    frequencies = background.residue_frequencies
    chosen = sorted(hmms, key=lambda h: h.M)
    chosen = [chosen[0], chosen[len(chosen) // 2], chosen[-1]]
    profiles = vitfilter.viterbi_profiles(chosen, background)
    rng = np.random.default_rng(7)
    sequences = [np.asarray(s.sequence) for s in proteins if len(s) <= 1500][::2]
    for length in (1, 2, 3, 17, 400, 2500):  # canonical residues with B, J, Z, O, U, X, '*' mixed in
        codes = rng.integers(0, 27, size=length).astype(np.uint8)
        codes[codes == 20] = 26
        sequences.append(codes)
    sequences.append(np.zeros(0, dtype=np.uint8))
    assert {21, 22, 23, 24, 25, 26, 27} <= set(np.concatenate(sequences).tolist())

    odds, leave1, stay1 = biasfilter.model_terms(profiles, frequencies)
    assert odds.shape == (3, 29, 2) and odds.dtype == leave1.dtype == stay1.dtype == np.float32
    p1, length_term, tail_term = biasfilter.length_terms([len(s) for s in sequences])
    assert p1.dtype == length_term.dtype == tail_term.dtype == np.float32

    pair_model, pair_sequence = (
        a.ravel().astype(np.int32)
        for a in np.meshgrid(np.arange(len(profiles)), np.arange(len(sequences)), indexing="ij")
    )
    scores, uncertain = emulate_kernel(
        sequences, pair_model, pair_sequence, odds, leave1, stay1, p1, length_term, tail_term
    )
    expected = np.concatenate([bias_scores(p, frequencies, sequences) for p in profiles])
    assert uncertain.mean() < 0.01
    resolved = filters.resolve_uncertain(scores, uncertain, pair_model, pair_sequence, profiles, frequencies, sequences)
    assert resolved.view(np.uint32).tolist() == expected.view(np.uint32).tolist()
    # Flagged pairs are rescored whatever the kernel wrote for them.
    forced = uncertain | (rng.random(len(scores)) < 0.05)
    garbage = np.where(forced, np.float32(np.nan), scores)
    resolved = filters.resolve_uncertain(garbage, forced, pair_model, pair_sequence, profiles, frequencies, sequences)
    assert resolved.view(np.uint32).tolist() == expected.view(np.uint32).tolist()


def test_logs_near_a_float32_rounding_boundary_are_flagged():
    """The kernel's test: a double log within a few ulps of a float32 midpoint is uncertain."""
    f = np.array([0.5, -3.25, 2.5, -87.0, 12.375], dtype=np.float32)
    midpoints = (f.astype(np.float64) + np.nextafter(f, np.float32(np.inf)).astype(np.float64)) / 2
    for ulps in (-4, -1, 0, 1, 4):
        d = midpoints + ulps * np.spacing(midpoints)
        unsure = np.zeros(len(d), bool)
        _rounded_log(np.exp(d), unsure)  # |d| ≥ 0.5: exp then log moves d by an ulp or two at most
        assert unsure.all()
    unsure = np.zeros(len(f), bool)
    _rounded_log(np.exp(f.astype(np.float64)), unsure)
    assert not unsure.any()


def test_length_terms_match_bias_scores_steps():
    """p1, L·logf(p1) and logf(1 − p1) as bias_scores rounds them, repeated lengths and L = 0 included."""
    logf = vitfilter.libm_logf()
    lengths = np.array([5, 0, 1, 5, 100_000, 33, 1])
    p1, length_term, tail_term = biasfilter.length_terms(lengths)
    for L, a, b, c in zip(lengths.tolist(), p1, length_term, tail_term):
        if L == 0:
            assert (a, b, c) == (0, 0, 0)
            continue
        q = np.float32(L) / np.float32(L + 1)
        assert a == q
        assert b == np.float32(np.float32(L) * np.float32(logf(float(q))))
        assert c == np.float32(logf(float(np.float32(1.0) - q)))


@pytest.mark.parametrize("M", [1, 7, 8, 100, 2405])
def test_transitions_match_bias_scores_steps(M):
    L1 = np.float32(np.float32(M) / np.float32(8.0))
    leave1, stay1 = biasfilter.composition_transitions(np.array([M]))
    assert leave1[0] == np.float32(1.0) / (L1 + np.float32(1.0))
    assert stay1[0] == L1 / (L1 + np.float32(1.0))
