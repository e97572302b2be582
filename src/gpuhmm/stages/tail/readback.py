"""What `kernels/tail/` writes (`schedule.run`'s outputs) as HMMER's hits: each finished pair's
serialized record (`p7_hit_Serialize`, written by the kernels), kept where `p7_Pipeline` would
create the hit (`exp(lnP)·Z` against E in double, with glibc's `exp`, as HMMER decides it).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from pyhmmer.easel import VectorU8

from .launch import OK
from .scores import reportable

F32 = np.float32
#: numpy's `exp` is within a few ulps of glibc's: E-values nearer E than this (relative) are
#: decided again with `math.exp`, so that every decision is glibc's.
_CLOSE = 1e-12


@dataclasses.dataclass
class Finished:
    """Per pair of a batch: its `status`, whether it `passed` F3, whether it has a reportable hit
    (`reported`); the records end to end (pair p's at offsets[p] .. offsets[p + 1])."""

    status: np.ndarray
    passed: np.ndarray
    reported: np.ndarray
    records: np.ndarray
    offsets: np.ndarray

    def record(self, p):
        """Pair p's record as a pyhmmer VectorU8."""
        return VectorU8(self.records[self.offsets[p] : self.offsets[p + 1]])

    def __iter__(self):
        """(status, passed, record or None) per pair."""
        for p, (status, passed, reported) in enumerate(zip(self.status, self.passed, self.reported)):
            yield int(status), bool(passed), self.record(p) if reported else None


def read_back(batch, outputs):
    """The `Finished` pairs of `batch` from `schedule.run`'s `outputs`."""
    status, hits = outputs["status"], outputs["hits"]
    passed = hits["passed"] != 0
    candidates = np.flatnonzero((status == OK) & passed & (hits["has_hit"] != 0))
    reported = np.zeros(len(status), bool)
    reported[candidates] = _reportable(batch, candidates, hits[candidates])
    return Finished(status, passed, reported, outputs["records"], outputs["record_offsets"])


def _reportable(batch, pairs, hits):
    """`scores.reportable` for each of `pairs` (their `hits`), vectorized."""
    pipelines = batch.pipelines
    setting = {name: np.array([p[name] for p in pipelines], np.float64) for name in ("E", "T", "Z")}
    by_E = np.array([bool(p["by_E"]) for p in pipelines])
    model = batch.pairs["model"][pairs]
    E, T, Z = (setting[name][model] for name in ("E", "T", "Z"))
    with np.errstate(over="ignore"):
        evalue = np.exp(hits["lnP"]) * Z
    kept = np.where(by_E[model], evalue <= E, hits["score"].astype(np.float64) >= T)
    for i in np.flatnonzero(by_E[model] & (np.abs(evalue - E) <= _CLOSE * np.abs(E))).tolist():
        pipeline = pipelines[int(model[i])]
        kept[i] = reportable(pipeline, F32(hits["score"][i]), float(hits["lnP"][i]), "by_E", "E", "T", "Z")
    return kept
