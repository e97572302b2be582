"""HMMER 3.4's Viterbi filter (`p7_ViterbiFilter`, `impl_sse/vitfilter.c`): its parameters and
`p7_Pipeline`'s decisions after MSV.

* `ViterbiProfile` holds the 16-bit Viterbi parameters exactly as HMMER's optimized profile
  does (`rwv`, `twv`, `xw`, `base_w`, `scale_w`, `ddbound_w`), read from the bytes that
  `OptimizedProfile.write` produces (`impl_sse/io.c`, `p7_oprofile_Write`).
* `second_stage` applies `p7_Pipeline`'s bias and Viterbi decisions to MSV survivors.

HMMER's own arithmetic of both filters, in numpy, is `engine.reference.vitfilter` and
`engine.reference.biasfilter`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import io
import math
import struct

import numpy as np

from ..hits.text import label
from .msvfilter import configured_profile, gumbel_pvalues

NEG_INF_WORD = -32768
_E, _N, _J, _C = 0, 1, 2, 3
_MOVE, _LOOP = 0, 1
_H3P_MAGIC = 0xB3E6F0F3


@functools.cache
def libm_logf():
    """The C library's float `logf`: HMMER's length terms are rounded through it."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.logf.restype = ctypes.c_float
    libm.logf.argtypes = [ctypes.c_float]
    return libm.logf


def _words(count):
    """HMMER's `p7O_NQW`: striped vectors of 8 int16 lanes for `count` nodes."""
    return max(2, (count - 1) // 8 + 1)


def _floats(count):
    return max(2, (count - 1) // 4 + 1)


def _wordify(scale_w, score):
    """`p7_oprofile.c` wordify(): roundf(scale·sc) clamped to int16 (half away from zero)."""
    value = float(np.float32(scale_w) * np.float32(score))
    value = math.copysign(math.floor(abs(value) + 0.5), value)
    return int(min(max(value, -32768.0), 32767.0))


@dataclasses.dataclass(frozen=True)
class ViterbiProfile:
    """One model's `p7_ViterbiFilter` and bias-filter parameters, as HMMER holds them."""

    name: str
    M: int
    rwv: np.ndarray  # int16 (Kp, Q, 8): emission words, lane z of vector q is node q + 1 + z·Q
    twv: np.ndarray  # int16 (8Q, 8): per q BM, MM, IM, DM, MD, MI, II; then Q vectors of DD
    xw: np.ndarray  # int16 (4, 2): [E, N, J, C] × [MOVE, LOOP] (MOVEs of N, J, C are per length)
    scale_w: float
    base_w: int
    ddbound_w: int
    nj: float  # expected J uses (0 unihit, 1 multihit), for the per-length MOVE words
    mu: float  # Viterbi Gumbel location (VMU)
    lam: float  # Viterbi Gumbel slope (VLAMBDA)
    composition: np.ndarray  # float32 (K,): the model's mean residue composition

    @property
    def Q(self):
        return self.rwv.shape[1]

    @functools.cached_property
    def node_emissions(self):
        """`rwv` in node order, int32 (Kp, M): column k − 1 is node k."""
        k = np.arange(self.M)
        return self.rwv[:, k % self.Q, k // self.Q].astype(np.int32)

    @functools.cached_property
    def node_transitions(self):
        """`twv` in node order, int32 (8, M): BM, MM, IM, DM, MD, MI, II, DD of node k at k − 1."""
        Q, k = self.Q, np.arange(self.M)
        q, z = k % Q, k // Q
        transitions = np.empty((8, self.M), dtype=np.int32)
        transitions[:7] = self.twv[: 7 * Q].reshape(Q, 7, 8)[q, :, z].T
        transitions[7] = self.twv[7 * Q :][q, z]
        return transitions

    @classmethod
    def from_h3p(cls, data, optimized, hmm):
        """From `optimized` and the `.h3p` bytes it writes (`configured`)."""
        M, Kp = optimized.M, hmm.alphabet.Kp
        Q8, Q4 = _words(M), _floats(M)
        # Parse from the end: the name, accession and description ahead are variable length.
        tail = 128 * Q4 + 16 * Kp * Q4 + 8 * 4 + 6 * 4 + 4 + 4 + 4 + 4
        start = len(data) - tail - (128 * Q8 + 16 * Kp * Q8 + 16 + 4 + 2 + 2 + 4)
        if struct.unpack_from("<I", data, 0)[0] != _H3P_MAGIC:
            raise ValueError(f"{hmm.name}: not an HMMER optimized profile")
        twv = np.frombuffer(data, "<i2", 8 * Q8 * 8, start).reshape(8 * Q8, 8)
        start += twv.nbytes
        rwv = np.frombuffer(data, "<i2", Kp * Q8 * 8, start).reshape(Kp, Q8, 8)
        start += rwv.nbytes
        xw = np.frombuffer(data, "<i2", 8, start).reshape(4, 2)
        scale_w, base_w, ddbound_w = struct.unpack_from("<fhh", data, start + 16)
        nj = struct.unpack_from("<f", data, len(data) - 16)[0]
        parameters = hmm.evalue_parameters.as_vector()
        return cls(
            name=label(hmm),
            M=M,
            rwv=rwv.astype(np.int16),
            twv=twv.astype(np.int16),
            xw=xw.astype(np.int16),
            scale_w=scale_w,
            base_w=base_w,
            ddbound_w=ddbound_w,
            nj=nj,
            mu=float(np.float32(parameters[2])),
            lam=float(np.float32(parameters[3])),
            composition=np.asarray(optimized.compositions, dtype=np.float32)[: hmm.alphabet.K],
        )

    def move_word(self, length):
        """`ReconfigRestLength`: the N, J and C MOVE word for a target of `length` residues."""
        nj = np.float32(self.nj)
        pmove = (np.float32(2.0) + nj) / (np.float32(length) + np.float32(2.0) + nj)
        return _wordify(self.scale_w, libm_logf()(float(pmove)))


def configured(hmms, background):
    """Per model, its OptimizedProfile as hmmsearch configures it (L = 400) and the `.h3p` bytes
    it writes, where the Viterbi and Forward filters read their parameters (pyhmmer exposes
    only some of them)."""
    written = []
    for hmm in hmms:
        optimized = configured_profile(hmm, background)
        filter_bytes, profile_bytes = io.BytesIO(), io.BytesIO()
        optimized.write(filter_bytes, profile_bytes)
        written.append((optimized, profile_bytes.getvalue()))
    return written


def viterbi_profiles(hmms, background, written=None):
    written = written or configured(hmms, background)
    return [ViterbiProfile.from_h3p(data, optimized, hmm) for hmm, (optimized, data) in zip(hmms, written)]


@dataclasses.dataclass(frozen=True)
class SecondStage:
    passed_bias: np.ndarray  # bool per sequence
    passed_viterbi: np.ndarray  # bool per sequence (HMMER's n_past_vit counts these)
    unscored: np.ndarray  # bool per sequence: passed on because `viterbi` could not score it


def second_stage(msv_scores, filter_scores, msv_gumbel, viterbi, viterbi_gumbel, F1, F2):
    """`p7_Pipeline`'s bias and Viterbi decisions for (model, sequence) pairs that passed F1.

    `filter_scores` are the bias filter's scores (`bias_scores`), or null1 for `--nobias`/`--max`.
    `msv_gumbel` and `viterbi_gumbel` are (μ, λ), scalars or one per pair. Viterbi runs only where
    the bias-corrected MSV P-value is above F2, as in HMMER: `viterbi(mask)` returns the scores of
    the pairs in `mask`, NaN where it could not score one (such a pair passes).
    """
    pvalues = gumbel_pvalues(msv_scores, filter_scores, *msv_gumbel)
    passed_bias = pvalues <= F1
    needs_viterbi = passed_bias & (pvalues > F2)
    passed_viterbi = passed_bias.copy()
    unscored = np.zeros_like(passed_bias)
    if needs_viterbi.any():
        scores = viterbi(needs_viterbi)
        mu, lam = (np.broadcast_to(np.asarray(g), pvalues.shape)[needs_viterbi] for g in viterbi_gumbel)
        unscored[needs_viterbi] = np.isnan(scores)
        passed_viterbi[needs_viterbi] = np.isnan(scores) | (
            gumbel_pvalues(scores, filter_scores[needs_viterbi], mu, lam) <= F2
        )
    return SecondStage(passed_bias, passed_viterbi, unscored)
