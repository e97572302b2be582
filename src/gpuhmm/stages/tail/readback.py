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
    results = []
    records, offsets = outputs["records"], outputs["record_offsets"]
    for p, pair in enumerate(batch.pairs):
        status, hit = int(outputs["status"][p]), outputs["hits"][p]
        record = None
        if status == OK and hit["passed"] and hit["has_hit"]:
            pipeline = batch.pipelines[int(pair["model"])]
            if reportable(pipeline, F32(hit["score"]), float(hit["lnP"]), "by_E", "E", "T", "Z"):
                record = VectorU8(records[offsets[p] : offsets[p + 1]])
        results.append((status, bool(hit["passed"]), record))
    return results
