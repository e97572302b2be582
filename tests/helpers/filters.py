"""The filter stages' references: pyhmmer's MSV filter per sequence, filter shards and profiles,
and the pipeline statistics the filter stages must give."""

from __future__ import annotations

import numpy as np
import pyhmmer

from gpuhmm.engine import filters
from gpuhmm.hits.tophits import filter_counts
from gpuhmm.stages import fwdfilter, msvfilter, vitfilter


def msv_filter_scores(hmm, sequences):
    """pyhmmer's `OptimizedProfile.msv_filter` (HMMER's p7_MSVFilter) per sequence; NaN if empty."""
    background = pyhmmer.plan7.Background(hmm.alphabet)
    profile = pyhmmer.plan7.Profile(hmm.M, hmm.alphabet)
    profile.configure(hmm, background, L=400)
    optimized = profile.to_optimized()
    scores = np.full(len(sequences), np.nan, dtype=np.float32)
    undecided = np.zeros(len(sequences), dtype=bool)
    for index, sequence in enumerate(sequences):
        if len(sequence):
            optimized.L = len(sequence)
            scores[index] = optimized.msv_filter(sequence)
            ssv = optimized.ssv_filter(sequence)
            undecided[index] = ssv is None or ssv != ssv
    return scores, undecided


def filter_shard(sequences):
    """A filter shard of pyhmmer digital sequences, in the given order."""
    pieces = [np.asarray(s.sequence, dtype=np.uint8) for s in sequences]
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(np.int64)
    residues = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
    return filters.FilterShard.build(residues, offsets, sequences[0].alphabet)


def filter_profiles(hmms, background):
    """Per model, the Viterbi-filter and Forward-filter parameters the GPU stages read."""
    written = vitfilter.configured(hmms, background)
    return (
        vitfilter.viterbi_profiles(hmms, background, written),
        [fwdfilter.ForwardProfile.from_h3p(data, hmm) for hmm, (_, data) in zip(hmms, written)],
    )


def per_model(pairs, models, sequences):
    """An F1Pairs as (models, sequences) arrays: MSV scores (NaN where not passed), undecided."""
    scores = np.full((models, sequences), np.nan, dtype=np.float32)
    scores[pairs.pair_model, pairs.pair_sequence] = pairs.scores
    undecided = np.zeros((models, sequences), dtype=bool)
    undecided[pairs.undecided_model, pairs.undecided_sequence] = True
    return scores, undecided


def assert_filter_stages_count_as_hmmsearch(engine, hmms, sequences, bias_filter):
    alphabet = hmms[0].alphabet
    background = pyhmmer.plan7.Background(alphabet)
    shard = filter_shard(sequences)
    results = filters.filter_stages(
        engine,
        msvfilter.msv_models(hmms),
        *filter_profiles(hmms, background),
        background.residue_frequencies,
        shard,
        0.02,
        1e-3,
        1e-5,
        bias_filter,
    )
    block = pyhmmer.easel.DigitalSequenceBlock(alphabet, sequences)
    for hmm, result in zip(hmms, results):
        expected = filter_counts(pyhmmer.plan7.Pipeline(alphabet, bias_filter=bias_filter).search_hmm(hmm, block))
        survivors = pyhmmer.easel.DigitalSequenceBlock(alphabet, [sequences[i] for i in result.survivors])
        tail = filter_counts(pyhmmer.plan7.Pipeline(alphabet, bias_filter=bias_filter).search_hmm(hmm, survivors))
        got = (
            len(result.passed_msv),
            len(result.passed_bias),
            tail["n_past_vit"] + len(result.stopped_after_viterbi),
            tail["n_past_fwd"],
        )
        assert got == (
            expected["n_past_msv"],
            expected["n_past_bias"],
            expected["n_past_vit"],
            expected["n_past_fwd"],
        ), hmm.name
        assert len(result.survivors) <= expected["n_past_vit"], hmm.name
