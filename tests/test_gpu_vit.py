"""The GPU bias and Viterbi filters against HMMER's own arithmetic and pipeline statistics."""

from __future__ import annotations

import numpy as np
import pyhmmer
import pytest

from gpuhmm import msv, prefilter, vitfilter
from gpuhmm._tophits import filter_counts

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def engine():
    from gpuhmm.gpu import GpuEngine

    return GpuEngine()


@pytest.fixture(scope="module")
def case(pfam_test_data):
    hmms, sequences = pfam_test_data
    hmms = sorted(hmms, key=lambda h: h.M)[:: max(1, len(hmms) // 6)]
    background = pyhmmer.plan7.Background(hmms[0].alphabet)
    shard = prefilter.FilterShard.from_digital(sequences)
    targets = [np.asarray(s.sequence, dtype=np.uint8) for s in sequences]
    return hmms, sequences, background, vitfilter.viterbi_profiles(hmms, background), shard, targets


def test_viterbi_kernel_equals_hmmer(engine, case):
    """Every model × 60 proteins plus the model's own consensus (an overflow): p7_ViterbiFilter's
    scores, through Vit16 and, where it defers, Vit32."""
    hmms, sequences, _, profiles, shard, targets = case
    rng = np.random.default_rng(3)
    pair_model = np.repeat(np.arange(len(hmms)), 60)
    pair_sequence = np.concatenate([rng.choice(len(targets), 60, replace=False) for _ in hmms])
    got = prefilter.viterbi_filter(engine, profiles, shard, pair_model, pair_sequence)
    for m, profile in enumerate(profiles):
        mine = pair_model == m
        expected = vitfilter.viterbi_scores(profile, [targets[i] for i in pair_sequence[mine]])
        same = (got[mine] == expected) | (np.isinf(got[mine]) & np.isinf(expected))
        assert same.all(), profile.name


def test_bias_kernel_equals_hmmer(engine, case):
    hmms, _, background, profiles, shard, targets = case
    pair_model = np.repeat(np.arange(len(hmms)), len(targets))
    pair_sequence = np.tile(np.arange(len(targets)), len(hmms))
    scores, uncertain = engine.bias(profiles, background.residue_frequencies, (shard.residues, shard.offsets),
                                    pair_model, pair_sequence)
    for m, profile in enumerate(profiles):
        mine = (pair_model == m) & ~uncertain
        expected = vitfilter.bias_scores(profile, background.residue_frequencies, [targets[i] for i in pair_sequence[mine]])
        assert (scores[mine] == expected).all(), profile.name
    assert uncertain.mean() < 1e-3


@pytest.mark.parametrize("bias_filter", [True, False], ids=["bias", "nobias"])
def test_gpu_filter_stages_count_as_hmmsearch(engine, case, bias_filter):
    hmms, sequences, background, profiles, shard, _ = case
    results = prefilter.filter_stages(engine, msv.msv_models(hmms), profiles, background.residue_frequencies,
                                      shard, 0.02, 1e-3, bias_filter)
    block = pyhmmer.easel.DigitalSequenceBlock(hmms[0].alphabet, sequences)
    for hmm, result in zip(hmms, results):
        expected = filter_counts(pyhmmer.plan7.Pipeline(hmm.alphabet, bias_filter=bias_filter).search_hmm(hmm, block))
        got = (int(result.passed_msv.sum()), int(result.passed_bias.sum()), int(result.survivors.sum()))
        assert got == (expected["n_past_msv"], expected["n_past_bias"], expected["n_past_vit"]), hmm.name
