"""Host side of the GPU bias filter (kernels/bias.cu), HMMER 3.4's `p7_bg_FilterScore`.

The kernel scores (model, sequence) pairs, one thread each. What it needs is prepared here, in
the float32 steps of `engine.reference.biasfilter.bias_scores` (the oracle), with glibc's `logf` where HMMER uses
it: per model the emission odds of the two-state composition HMM (`esl_hmm_Configure`) and the
composition state's leave/stay transitions from L1 = M/8; per target length the null state's
p1 = L/(L+1) and the length terms L·logf(p1) and logf(1 − p1). Pairs the kernel flags as
`uncertain` (a double log too near a float32 rounding boundary to trust CUDA's log over
glibc's) are rescored here with the oracle.

No CuPy here: this module imports on machines without CUDA (engine/gpu.py launches the kernel).
"""

from __future__ import annotations

import functools

import numpy as np

from . import vitfilter

#: Rows of the kernel's odds table: Easel's amino alphabet codes 0..28 (Kp).
ODDS_ROWS = 29


def composition_odds(profile, background_frequencies):
    """`esl_hmm_Configure`'s emission odds, float32 (29, 2): [code, (null, composition)]."""
    K = len(profile.composition)
    f = np.asarray(background_frequencies, dtype=np.float32)[:K]
    odds = _emission_odds(f, profile.composition)
    if odds.shape != (ODDS_ROWS, 2):
        raise ValueError(f"{profile.name}: the bias filter needs the amino alphabet (K = 20)")
    return odds


def composition_transitions(M):
    """The composition state's (leave1, stay1), float32, for model lengths M: L1 = M/8."""
    L1 = np.asarray(M, dtype=np.float32) / np.float32(8.0)
    stay1 = L1 / (L1 + np.float32(1.0))
    leave1 = np.float32(1.0) / (L1 + np.float32(1.0))
    return leave1, stay1


def model_terms(profiles, background_frequencies):
    """Per model: odds float32 (models, 29, 2), leave1 and stay1 float32 (models,)."""
    odds = np.zeros((len(profiles), ODDS_ROWS, 2), dtype=np.float32)
    for index, profile in enumerate(profiles):
        odds[index] = composition_odds(profile, background_frequencies)
    leave1, stay1 = composition_transitions(np.array([p.M for p in profiles], dtype=np.int64))
    return odds, leave1, stay1


def length_terms(lengths):
    """Per target length: p1, length_term = L·logf(p1) and tail_term = logf(1 − p1), float32.

    Computed once per distinct length. An empty target gets zeros (the kernel scores it 0).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    unique, inverse = np.unique(lengths, return_inverse=True)
    p1 = unique.astype(np.float32) / (unique + 1).astype(np.float32)
    logs = np.array([_logs(length) for length in unique.tolist()], dtype=np.float32).reshape(-1, 2)
    length_term = unique.astype(np.float32) * logs[:, 0]
    inverse = inverse.reshape(lengths.shape)
    return p1[inverse], length_term[inverse], logs[inverse, 1]


@functools.cache
def _logs(length):
    """(logf(p1), logf(1 − p1)) for a target of `length`, once per length: every shard's lengths
    are mostly the same few thousand. logf(p1 = 0) is −inf; an empty target's terms are 0."""
    p1 = np.float32(length) / np.float32(length + 1)
    logf = vitfilter.libm_logf()
    return (logf(float(p1)) if length else 0.0), logf(float(np.float32(1.0) - p1))


#: Residues each amino-acid degeneracy code stands for (Easel's amino alphabet, codes 21–26).
_AMINO_DEGENERACIES = {21: "DN", 22: "IL", 23: "EQ", 24: "K", 25: "C", 26: "ACDEFGHIKLMNPQRSTVWY"}


def _emission_odds(frequencies, composition):
    """`esl_hmm_Configure`'s emission odds for the null state and the composition state."""
    K = len(frequencies)
    odds = np.ones((K + 9, 2), dtype=np.float32)  # the null state emits the background: odds 1
    odds[:K, 1] = composition / frequencies
    for code, residues in _AMINO_DEGENERACIES.items():
        members = ["ACDEFGHIKLMNPQRSTVWY".index(r) for r in residues]
        for state, emissions in enumerate((frequencies, composition)):
            numerator, denominator = np.float32(0.0), np.float32(0.0)
            for y in members:
                numerator = np.float32(numerator + emissions[y])
                denominator = np.float32(denominator + frequencies[y])
            odds[code, state] = numerator / denominator
    return odds
