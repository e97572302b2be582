"""The host's part of HMMER 3.4's scoring after the Forward filter (`src/p7_pipeline.c`,
`src/p7_bg.c`, `src/impl_sse/p7_logsum.c`): what depends on glibc's double `log` of the target
length alone (the null1 score and the length correction), `p7_FLogsum`'s table as
`p7_FLogsumInit` builds it, and the reporting decision (`exp(lnP)·Z` against E in double) that
`p7_Pipeline` makes at hit creation.
"""

from __future__ import annotations

import functools
import math

import numpy as np

F32 = np.float32
FLOGSUM_SCALE, FLOGSUM_ENTRIES = F32(1000.0), 16000


@functools.cache
def flogsum_table():
    """`p7_FLogsumInit`: log(1 + e^(−i/1000)) in float32 for i < 16000."""
    return np.array([math.log(1.0 + math.exp(-i / 1000.0)) for i in range(FLOGSUM_ENTRIES)], dtype=F32)


@functools.cache
def null_one(L):
    """`p7_bg_NullOne` after `p7_bg_SetLength(bg, L)`: the null model's score in nats."""
    p1 = F32(L) / F32(L + 1)
    return F32(float(F32(L)) * math.log(float(p1)) + math.log(1.0 - float(p1)))


@functools.cache
def log_length(L):
    """log(L ⊘ (L + 3)): the per-residue length correction of the sum and domain scores."""
    return math.log(float(F32(L) / F32(L + 3)))


def reportable(pipeline, score, lnP, by_E, E, T, Z):
    """`p7_pli_TargetReportable` and its siblings, for one setting pair (by E-value or score;
    the float32 score compared in double with the double threshold)."""
    return math.exp(lnP) * pipeline[Z] <= pipeline[E] if pipeline[by_E] else float(score) >= pipeline[T]
