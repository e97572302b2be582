"""The Viterbi kernel's arithmetic (engine.reference.vitfilter.emulate, a numpy model of
kernels/vit.cu) against HMMER's p7_ViterbiFilter (engine.reference.vitfilter.viterbi_scores),
and the filter stages against HMMER's pipeline statistics through the numpy reference engine."""

from __future__ import annotations

import numpy as np
import pyhmmer
import pytest

from gpuhmm.engine.pairs import pair_batch
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.engine.reference.vitfilter import emulate, viterbi_scores
from gpuhmm.stages import vitfilter, vitlayout

from helpers.filters import assert_filter_stages_count_as_hmmsearch


def _targets(hmms, sequences, count=36):
    """Proteins (many end in '*'), strong hits (a model's consensus, repeated: overflow), a
    long random sequence, and a '*' inside a sequence."""
    alphabet = hmms[0].alphabet
    rng = np.random.default_rng(11)
    chosen = [
        np.asarray(sequences[i].sequence, dtype=np.uint8) for i in rng.choice(len(sequences), count, replace=False)
    ]
    for hmm in hmms:
        consensus = pyhmmer.easel.TextSequence(sequence=hmm.consensus.upper()).digitize(alphabet)
        chosen.append(np.tile(np.asarray(consensus.sequence, dtype=np.uint8), 3))
    chosen.append(rng.integers(0, 20, 3000).astype(np.uint8))
    chosen.append(np.concatenate([chosen[0], [27], chosen[1]]).astype(np.uint8))
    return chosen


@pytest.fixture(scope="module")
def viterbi_case(pfam_test_data):
    hmms, sequences = pfam_test_data
    picked = sorted(hmms, key=lambda h: h.M)[:: max(1, len(hmms) // 3)][:3]
    profiles = vitfilter.viterbi_profiles(picked, pyhmmer.plan7.Background(picked[0].alphabet))
    targets = _targets(picked, sequences)
    return profiles, targets, [viterbi_scores(profile, targets) for profile in profiles]


def _same(got, expected):
    return (got == expected) | (np.isinf(got) & np.isinf(expected) & (np.sign(got) == np.sign(expected)))


def test_vit32_lanes_are_hmmers_arithmetic(viterbi_case):
    profiles, targets, expected = viterbi_case
    for profile, reference in zip(profiles, expected):
        xc, status = emulate(profile, "vit32", targets, profile.M + 5)
        scores = vitlayout.scores_from_xc(
            profile.base_w, profile.scale_w, xc, vitlayout.sequence_moves(profile, [len(t) for t in targets]), status
        )
        assert _same(scores, reference).all(), profile.name
        assert np.isposinf(reference).any()  # the case covers HMMER's overflow


def test_vit16_lanes_equal_hmmer_where_they_vouch(viterbi_case):
    profiles, targets, expected = viterbi_case
    for profile, reference in zip(profiles, expected):
        assert vitlayout.lanes16_supported(profile)
        xc, status = emulate(profile, "vit16", targets, profile.M + 5)
        scores = vitlayout.scores_from_xc(
            profile.base_w, profile.scale_w, xc, vitlayout.sequence_moves(profile, [len(t) for t in targets]), status
        )
        vouched = status != vitlayout.NEEDS_EXACT
        assert _same(scores, reference)[vouched].all(), profile.name
        # Overflows and the inner '*' are left to Vit32; ordinary proteins are not.
        assert not vouched[np.isposinf(reference)].any()
        assert not vouched[-1]
        assert vouched[: len(targets) - len(profiles) - 2].mean() > 0.9


def test_pair_batch_covers_every_pair_in_chunks_of_one_model():
    lengths = np.array([5, 300, 40, 1000, 7, 60])
    pair_model = np.array([1, 0, 1, 1, 0, 2, 2])
    pair_sequence = np.array([0, 1, 3, 2, 4, 5, 3])
    batch = pair_batch(pair_model, pair_sequence, lengths, chunk_residues=100)
    assert sorted(batch.pair_order.tolist()) == list(range(7))
    assert (batch.pair_sequence == pair_sequence[batch.pair_order]).all()
    covered = np.zeros(7, dtype=int)
    for model, start, end in zip(batch.chunk_model, batch.chunk_start, batch.chunk_end):
        covered[start:end] += 1
        assert (pair_model[batch.pair_order[start:end]] == model).all()
        assert (np.diff(lengths[batch.pair_sequence[start:end]]) <= 0).all()
    assert (covered == 1).all()
    assert lengths[batch.pair_sequence[batch.chunk_start[0]]] == 1000  # the longest chunk first


@pytest.mark.parametrize("bias_filter", [True, False], ids=["bias", "nobias"])
def test_filter_stages_count_as_hmmsearch(pfam_test_data, bias_filter):
    """Sequences past MSV and bias equal HMMER's counts, and so does past Viterbi once the ones
    the Forward filter stopped are added; pyhmmer on the survivors alone passes as many through
    Forward as on every sequence."""
    hmms, sequences = pfam_test_data
    picked = sorted(hmms, key=lambda h: h.M)[1:3]
    assert_filter_stages_count_as_hmmsearch(ReferenceEngine(), picked, sequences[:150], bias_filter)
