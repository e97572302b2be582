"""The GPU bias, Viterbi and Forward filters against HMMER's own arithmetic (the Forward filter
against its float64 reference) and pipeline statistics."""

from __future__ import annotations

import numpy as np
import pyhmmer
import pytest

from gpuhmm.engine import filters
from gpuhmm.engine.reference.biasfilter import bias_scores
from gpuhmm.engine.reference.fwdfilter import forward_scores
from gpuhmm.engine.reference.vitfilter import viterbi_scores
from gpuhmm.stages import fwdfilter

from helpers.filters import assert_filter_stages_count_as_hmmsearch, filter_profiles, filter_shard

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine():
    from gpuhmm.engine.gpu import GpuEngine

    return GpuEngine()


@pytest.fixture(scope="module")
def case(pfam_test_data):
    hmms, sequences = pfam_test_data
    hmms = sorted(hmms, key=lambda h: h.M)[:: max(1, len(hmms) // 6)]
    background = pyhmmer.plan7.Background(hmms[0].alphabet)
    shard = filter_shard(sequences)
    targets = [np.asarray(s.sequence, dtype=np.uint8) for s in sequences]
    return hmms, sequences, background, filter_profiles(hmms, background)[0], shard, targets


def test_viterbi_kernel_equals_hmmer(engine, case):
    """Every model × 60 proteins plus the model's own consensus (an overflow): p7_ViterbiFilter's
    scores, through Vit16 and, where it defers, Vit32."""
    hmms, sequences, _, profiles, shard, targets = case
    rng = np.random.default_rng(3)
    pair_model = np.repeat(np.arange(len(hmms)), 60)
    pair_sequence = np.concatenate([rng.choice(len(targets), 60, replace=False) for _ in hmms])
    got = filters.viterbi_filter(engine, profiles, shard, pair_model, pair_sequence)
    for m, profile in enumerate(profiles):
        mine = pair_model == m
        expected = viterbi_scores(profile, [targets[i] for i in pair_sequence[mine]])
        same = (got[mine] == expected) | (np.isinf(got[mine]) & np.isinf(expected))
        assert same.all(), profile.name


def test_bias_kernel_equals_hmmer(engine, case):
    hmms, _, background, profiles, shard, targets = case
    pair_model = np.repeat(np.arange(len(hmms)), len(targets))
    pair_sequence = np.tile(np.arange(len(targets)), len(hmms))
    scores, uncertain = engine.bias(
        profiles, background.residue_frequencies, (shard.residues, shard.offsets), pair_model, pair_sequence
    )
    for m, profile in enumerate(profiles):
        mine = (pair_model == m) & ~uncertain
        expected = bias_scores(profile, background.residue_frequencies, [targets[i] for i in pair_sequence[mine]])
        assert (scores[mine] == expected).all(), profile.name
    assert uncertain.mean() < 1e-3


def test_forward_kernel_equals_reference(engine, case, pfam_test_data):
    """Every model × 60 proteins, the model's consensus three times over (rescaled rows) and a
    long random sequence: the kernel's float32 scores against the float64 reference, well inside
    the F3 margin."""
    hmms, _, background, _, _, targets = case
    forward_profiles = filter_profiles(hmms, background)[1]
    rng = np.random.default_rng(5)
    extra = [
        np.tile(
            np.asarray(
                pyhmmer.easel.TextSequence(sequence=h.consensus.upper()).digitize(h.alphabet).sequence, dtype=np.uint8
            ),
            3,
        )
        for h in hmms
    ] + [rng.integers(0, 20, 5000).astype(np.uint8)]
    shard = filter_shard(
        pfam_test_data[1] + [pyhmmer.easel.DigitalSequence(hmms[0].alphabet, sequence=e) for e in extra]
    )
    every = targets + extra
    pair_model = np.repeat(np.arange(len(hmms)), 60 + len(extra))
    pair_sequence = np.concatenate(
        [np.r_[rng.choice(len(targets), 60, replace=False), len(targets) + np.arange(len(extra))] for _ in hmms]
    )
    got = filters.forward_filter(engine, forward_profiles, shard, pair_model, pair_sequence)
    for m, profile in enumerate(forward_profiles):
        mine = pair_model == m
        expected = forward_scores(profile, [every[i] for i in pair_sequence[mine]])
        empty = shard.lengths[pair_sequence[mine]] == 0  # xC stays 0: −inf in both
        assert (got[mine][empty] == -np.inf).all() and (expected[empty] == -np.inf).all()
        error = np.abs(got[mine][~empty] - expected[~empty])
        assert (error < 1e-3 * np.maximum(1.0, np.abs(expected[~empty]))).all(), (profile.name, error.max())
        rounding = fwdfilter.margin_nats(shard.lengths[pair_sequence[mine]], profile.M) - fwdfilter.MARGIN_NATS
        assert (error < rounding[~empty]).all(), profile.name


@pytest.mark.parametrize("bias_filter", [True, False], ids=["bias", "nobias"])
def test_gpu_filter_stages_count_as_hmmsearch(engine, case, bias_filter):
    hmms, sequences, *_ = case
    assert_filter_stages_count_as_hmmsearch(engine, hmms, sequences, bias_filter)
