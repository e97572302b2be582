"""Host side of the GPU bias filter (kernels/bias.cu), HMMER 3.4's `p7_bg_FilterScore`.

The kernel scores (model, sequence) pairs, one thread each. What it needs is prepared here, in
the float32 steps of `vitfilter.bias_scores` (the oracle), with glibc's `logf` where HMMER uses
it: per model the emission odds of the two-state composition HMM (`esl_hmm_Configure`) and the
composition state's leave/stay transitions from L1 = M/8; per target length the null state's
p1 = L/(L+1) and the length terms L·logf(p1) and logf(1 − p1). Pairs the kernel flags as
`uncertain` (a double log too near a float32 rounding boundary to trust CUDA's log over
glibc's) are rescored here with the oracle.

No CuPy here: this module imports on machines without CUDA (gpu.py launches the kernel).
"""

from __future__ import annotations

import numpy as np

from . import vitfilter

#: Rows of the kernel's odds table: Easel's amino alphabet codes 0..28 (Kp).
ODDS_ROWS = 29


def composition_odds(profile, background_frequencies):
    """`esl_hmm_Configure`'s emission odds, float32 (29, 2): [code, (null, composition)]."""
    K = len(profile.composition)
    f = np.asarray(background_frequencies, dtype=np.float32)[:K]
    odds = vitfilter._emission_odds(f, profile.composition)
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
    q1 = np.float32(1.0) - p1
    logf = vitfilter._logf()
    # logf(p1 = 0) is −inf; an empty target's terms are 0 (logf(1) = 0 already for the tail).
    log_p1 = np.array([logf(float(v)) if n else 0.0 for v, n in zip(p1, unique)], dtype=np.float32)
    tail = np.array([logf(float(v)) for v in q1], dtype=np.float32)
    length_term = unique.astype(np.float32) * log_p1
    inverse = inverse.reshape(lengths.shape)
    return p1[inverse], length_term[inverse], tail[inverse]


def resolve_uncertain(scores, uncertain, pair_model, pair_sequence, profiles, background_frequencies,
                      sequences):
    """The kernel's scores with every flagged pair rescored by `vitfilter.bias_scores`.

    `pair_model` and `pair_sequence` index `profiles` and `sequences` (digital residue arrays).
    """
    scores = np.array(scores, dtype=np.float32, copy=True)
    flagged = np.flatnonzero(np.asarray(uncertain))
    pair_model = np.asarray(pair_model)[flagged]
    pair_sequence = np.asarray(pair_sequence)[flagged]
    for model in np.unique(pair_model):
        mine = pair_model == model
        targets = [sequences[s] for s in pair_sequence[mine]]
        scores[flagged[mine]] = vitfilter.bias_scores(profiles[model], background_frequencies, targets)
    return scores
