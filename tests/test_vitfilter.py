"""The bias and Viterbi filters (vitfilter.py) against HMMER 3.4's own pipeline statistics."""

from __future__ import annotations

import numpy as np
import pyhmmer
import pytest

from gpuhmm.engine.reference.biasfilter import bias_scores
from gpuhmm.engine.reference.vitfilter import viterbi_scores
from gpuhmm.hits.tophits import filter_counts
from gpuhmm.stages import msvfilter, vitfilter

from helpers.filters import msv_filter_scores


def _pipeline_counts(hmm, sequences, **options):
    pipeline = pyhmmer.plan7.Pipeline(hmm.alphabet, **options)
    return filter_counts(pipeline.search_hmm(hmm, pyhmmer.easel.DigitalSequenceBlock(hmm.alphabet, sequences)))


@pytest.mark.parametrize("bias_filter", [True, False], ids=["bias", "nobias"])
def test_stage_counts_equal_hmmsearch(pfam_test_data, bias_filter):
    """Sequences past MSV, bias and Viterbi equal HMMER's pipeline counts, model by model."""
    hmms, sequences = pfam_test_data
    alphabet = hmms[0].alphabet
    background = pyhmmer.plan7.Background(alphabet)
    chosen = sorted(hmms, key=lambda h: h.M)[:: max(1, len(hmms) // 6)]
    lengths = np.array([len(s) for s in sequences])
    terms = msvfilter.LengthTerms.for_lengths(alphabet, lengths)
    _, null1 = terms.lookup(lengths)
    residues = [np.asarray(s.sequence) for s in sequences]
    for hmm in chosen:
        expected = _pipeline_counts(hmm, sequences, bias_filter=bias_filter)
        model = msvfilter.msv_models([hmm])[0]
        profile = vitfilter.viterbi_profiles([hmm], background)[0]
        usc, _ = msv_filter_scores(hmm, sequences)
        passed_msv = msvfilter.gumbel_pvalues(usc, null1, model.mu, model.lam) <= 0.02
        survivors = np.nonzero(passed_msv)[0]
        subset = [residues[i] for i in survivors]
        bias = bias_scores(profile, background.residue_frequencies, subset) if bias_filter else None
        stage = vitfilter.second_stage(
            usc[survivors],
            null1[survivors] if bias is None else bias,
            (model.mu, model.lam),
            lambda mask, profile=profile, subset=subset: viterbi_scores(
                profile, [s for s, m in zip(subset, mask) if m]
            ),
            (profile.mu, profile.lam),
            0.02,
            1e-3,
        )
        got = (len(survivors), int(stage.passed_bias.sum()), int(stage.passed_viterbi.sum()))
        assert got == (expected["n_past_msv"], expected["n_past_bias"], expected["n_past_vit"]), hmm.name


def test_profile_words_match_hmmer_layout(pfam_test_data):
    """Parameters parsed from the written profile have HMMER's shapes, scale and bounds."""
    hmms, _ = pfam_test_data
    alphabet = hmms[0].alphabet
    profile = vitfilter.viterbi_profiles(hmms[:1], pyhmmer.plan7.Background(alphabet))[0]
    Q = max(2, (profile.M - 1) // 8 + 1)
    assert profile.rwv.shape == (alphabet.Kp, Q, 8) and profile.twv.shape == (8 * Q, 8)
    assert profile.base_w == 12000 and profile.scale_w == pytest.approx(500 / np.log(2), rel=1e-6)
    assert (profile.twv <= 0).all()
    # Padding lanes past node M hold −inf emissions (striped: lane z of vector q is q + 1 + z·Q).
    q, z = np.meshgrid(np.arange(Q), np.arange(8), indexing="ij")
    assert (profile.rwv[:, q + 1 + z * Q > profile.M] == vitfilter.NEG_INF_WORD).all()
    # ReconfigRestLength: multihit move word for L = 400, as HMMER 3.4 computes it.
    assert profile.move_word(400) == -3535
