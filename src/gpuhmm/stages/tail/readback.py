"""What `kernels/tail/` writes (`schedule.run`'s outputs) as HMMER's hits: each finished pair's
serialized record (`p7_hit_Serialize`, written by the kernels), kept where `p7_Pipeline` would
create the hit (`exp(lnP)·Z` against E in double, with glibc's `exp`, as HMMER decides it).
"""

from __future__ import annotations

import numpy as np
from pyhmmer.easel import VectorU8

from .launch import OK
from .scores import reportable

F32 = np.float32


def read_back(batch, outputs):
    """Per pair of `batch`: (status, passed, its record as a pyhmmer VectorU8, or None where the
    pair has no reportable hit)."""
    status, hits = outputs["status"], outputs["hits"]
    records, offsets = outputs["records"], outputs["record_offsets"]
    passed = hits["passed"] != 0
    kept = [None] * len(status)
    scores, lnP, models = hits["score"], hits["lnP"], batch.pairs["model"]
    for p in np.flatnonzero((status == OK) & passed & (hits["has_hit"] != 0)).tolist():
        pipeline = batch.pipelines[int(models[p])]
        if reportable(pipeline, F32(scores[p]), float(lnP[p]), "by_E", "E", "T", "Z"):
            kept[p] = VectorU8(records[offsets[p] : offsets[p + 1]])
    return list(zip(status.tolist(), passed.tolist(), kept))
