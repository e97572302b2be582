"""HMMER 3.4's null2 (biased composition) model of a domain (`impl_sse/null2.c`):
`p7_Null2_ByExpectation` (from the posteriors of an envelope) and `p7_Null2_ByTrace` (from the
states of one sampled domain), bit for bit.

Both average the match emission odds over the domain's expected (or counted) use of each node.
Float rules kept: the per-node usage sums run over rows in order (`accumulate`); the
normalizer is `1.0 / (float) Ld` (a double division rounded once, equal to the float32 one); for
each residue x the striped sum runs q = 0..Q−1 adding usage(M)·odds, then usage(I) (insert odds
are 1), lane-wise, then a horizontal sum (a0 + a1) + (a2 + a3), then the N/C/J share.
Degenerate residues get the float32 mean of their members' odds (`esl_abc_FAvgScVec`); gap,
nonresidue and missing codes get 1.
"""

from __future__ import annotations

import numpy as np

from gpuhmm.stages.tail.profile import F32

from .fwdback import hsum
from .oprofile import lane


def _odds(profile, M_use, I_use, xfactor):
    """null2[x] from normalized per-node usage (Q, 4) of M and I states and the N/C/J share."""
    abc = profile.alphabet
    terms = np.empty((abc.K, 2 * profile.Q, 4), dtype=F32)
    terms[:, 0::2] = M_use * profile.emissions[: abc.K]
    terms[:, 1::2] = I_use
    lanes = np.add.accumulate(terms, axis=1)[:, -1]  # sv += M·odds, then sv += I, along q
    null2 = np.zeros(abc.Kp, dtype=F32)
    for x in range(abc.K):
        null2[x] = hsum(lanes[x]) + xfactor
    for x, members in enumerate(abc.degenerate, start=abc.K + 1):
        total = F32(0.0)
        for y in members:
            total = total + null2[y]
        null2[x] = total / F32(len(members))
    null2[abc.K] = null2[abc.Kp - 2] = null2[abc.Kp - 1] = 1.0
    return null2


def null2_by_expectation(profile, posteriors):
    """`p7_Null2_ByExpectation`: null2 odds of the envelope whose posterior matrix (`decoding`)
    is `posteriors`: each node's expected use, summed over rows 1..Ld, over Ld."""
    norm = F32(1.0) / F32(posteriors.L)
    M_use = np.add.accumulate(posteriors.M[1:], axis=0)[-1] * norm
    I_use = np.add.accumulate(posteriors.I[1:], axis=0)[-1] * norm
    N, C, J = (np.add.accumulate(column[1:])[-1] * norm for column in (posteriors.N, posteriors.C, posteriors.J))
    return _odds(profile, M_use, I_use, (N + C) + J)


def null2_by_trace(profile, trace, start, end):
    """`p7_Null2_ByTrace`: null2 odds of the domain at trace steps `start`..`end` (its B..E): the
    emitting steps count toward their node's M slot, inserts included, over their number."""
    counts = np.zeros((profile.Q, 4), dtype=F32)
    emitted = 0
    for z in range(start, end + 1):
        if trace.i[z] > 0:
            emitted += 1
            counts[lane(profile, trace.k[z])] += F32(1.0)  # a B..E segment emits only from M and I
    norm = F32(1.0) / F32(emitted)
    return _odds(profile, counts * norm, np.zeros_like(counts), F32(0.0))
