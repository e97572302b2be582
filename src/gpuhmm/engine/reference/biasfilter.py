"""HMMER 3.4's `p7_bg_FilterScore` in numpy: the bias filter's float32 steps, in HMMER's order.

The oracle the GPU bias kernel is checked against, and how the host rescores the pairs the
kernel flags as uncertain (`engine.filters.resolve_uncertain`).
"""

from __future__ import annotations

import math

import numpy as np

from ...stages.biasfilter import _emission_odds
from ...stages.vitfilter import libm_logf


def bias_scores(profile, background_frequencies, sequences):
    """`p7_bg_FilterScore` (float32 nats) for digital sequences of the amino alphabet."""
    K = len(profile.composition)
    f = np.asarray(background_frequencies, dtype=np.float32)[:K]
    odds = _emission_odds(f, profile.composition)
    L1 = np.float32(np.float32(profile.M) / np.float32(8.0))
    stay1 = L1 / (L1 + np.float32(1.0))
    leave1 = np.float32(1.0) / (L1 + np.float32(1.0))
    logf = libm_logf()
    scores = np.zeros(len(sequences), dtype=np.float32)
    for b, sequence in enumerate(sequences):
        L = len(sequence)
        if L == 0:
            continue
        p1 = np.float32(L) / np.float32(L + 1)
        t = np.array([[p1, np.float32(1.0) - p1], [leave1, stay1]], dtype=np.float32)
        e = odds[np.asarray(sequence, dtype=np.intp)]  # (L, 2)
        dp = e[0] * np.array([0.999, 0.001], dtype=np.float32)
        total = np.float32(0.0)
        for i in range(L):
            if i:
                dp = (np.float32(dp[0] * t[0]) + np.float32(dp[1] * t[1])) * e[i]
            peak = np.float32(max(np.float32(0.0), dp[0], dp[1]))
            dp = dp / peak
            total = np.float32(total + np.float32(math.log(float(peak))))
        total = np.float32(total + np.float32(math.log(float(np.float32(dp[0]) + np.float32(dp[1])))))
        scores[b] = np.float32(
            np.float32(total + np.float32(np.float32(L) * np.float32(logf(float(p1)))))
            + np.float32(logf(float(np.float32(1.0) - p1)))
        )
    return scores
