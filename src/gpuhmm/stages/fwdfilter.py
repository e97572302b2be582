"""HMMER 3.4's Forward filter (`p7_ForwardParser`, `impl_sse/fwdback.c`) and its F3 test.

The GPU kernel (kernels/fwd.cu) and `forward_scores`, its numpy reference, compute the Forward
score of the local multihit model in probability space with HMMER's own float32 parameters,
`tfv`, `rfv` and `xf`, read from the `.h3p` bytes (`p7_oprofile_Write`), and HMMER's per-length
N/J/C loops (`p7_oprofile_ReconfigRestLength`). The sums run in another order than HMMER's
striped SSE, and HMMER's D→D passes stop when a pass no longer changes a float, so the scores
agree to rounding, not to the bit. That is enough here: pyhmmer runs every stage again on the
pairs this filter passes, so the filter only has to pass a superset of HMMER's.

The decision is therefore made with a margin. A pair passes when its score plus
`margin_nats(L, M)` passes F3. The margin is one bit, plus a float32 rounding bound that grows
with the length of the dynamic-programming recursion, 16·(L + M)·2⁻²⁴ nats for each of HMMER's
score and ours. The largest difference measured against pyhmmer was far below this (see
tests/test_fwdfilter.py). The one bit costs little: F3 passes 10⁻⁵ of random sequences, and one
more bit at most doubles that share. A pair whose score is not finite also passes, and
pyhmmer decides it.
"""

from __future__ import annotations

import dataclasses
import math
import struct

import numpy as np

from ..hits.text import label

#: Row of `xf`: E, N, J, C; column: MOVE, LOOP (p7O_XSTATES, p7O_XTRANSITIONS).
_E, _MOVE, _LOOP = 0, 0, 1
#: HMMER rescales a row when its xE passes this ("sparse rescaling").
RESCALE_ABOVE = 1.0e4
#: The F3 margin's fixed part, in nats (one bit), and the rounding slope per DP step.
MARGIN_NATS = math.log(2.0)
ROUNDING_PER_STEP = 16 * 2.0**-24


@dataclasses.dataclass(frozen=True)
class ForwardProfile:
    """One model's Forward-filter parameters in node order, as HMMER's optimized profile holds them."""

    name: str
    M: int
    emissions: np.ndarray  # float32 (Kp, M): rfv, odds ratio of residue x at node k (column k − 1)
    transitions: np.ndarray  # float32 (8, M): BM MM IM DM MD MI II DD of node k at column k − 1, as twv
    e_move: float  # float32: E → C
    e_loop: float  # float32: E → J
    nj: float  # expected J uses, for the per-length N/J/C words
    tau: float  # Forward exponential tail location (FTAU)
    lam: float  # Forward exponential tail slope (FLAMBDA)

    @classmethod
    def from_h3p(cls, data, hmm):
        """From the `.h3p` bytes `OptimizedProfile.write` gives (see `vitfilter.configured`)."""
        M, Kp = hmm.M, hmm.alphabet.Kp
        Q = max(2, (M - 1) // 4 + 1)  # p7O_NQF: striped vectors of 4 float lanes
        # The Forward part sits just before the cutoffs, nj, mode, L and the closing magic.
        start = len(data) - (128 * Q + 16 * Kp * Q + 32 + 6 * 4 + 4 * 4)
        tfv = np.frombuffer(data, "<f4", 8 * Q * 4, start).reshape(8 * Q, 4)
        rfv = np.frombuffer(data, "<f4", Kp * Q * 4, start + tfv.nbytes).reshape(Kp, Q, 4)
        xf = np.frombuffer(data, "<f4", 8, start + tfv.nbytes + rfv.nbytes).reshape(4, 2)
        nj = struct.unpack_from("<f", data, len(data) - 16)[0]
        k = np.arange(M)
        q, z = k % Q, k // Q  # lane z of vector q is node q + 1 + z·Q
        transitions = np.empty((8, M), dtype=np.float32)
        transitions[:7] = tfv[: 7 * Q].reshape(Q, 7, 4)[q, :, z].T
        transitions[7] = tfv[7 * Q :][q, z]
        parameters = hmm.evalue_parameters.as_vector()
        return cls(
            name=label(hmm),
            M=M,
            emissions=np.ascontiguousarray(rfv[:, q, z], dtype=np.float32),
            transitions=transitions,
            e_move=float(xf[_E, _MOVE]),
            e_loop=float(xf[_E, _LOOP]),
            nj=nj,
            tau=float(np.float32(parameters[4])),
            lam=float(np.float32(parameters[5])),
        )


def length_moves(nj, lengths):
    """`ReconfigRestLength`'s float32 N/J/C MOVE probability per target length (LOOP = 1 − MOVE)."""
    nj = np.float32(nj)
    return (np.float32(2.0) + nj) / (np.asarray(lengths, dtype=np.float32) + np.float32(2.0) + nj)


def margin_nats(lengths, M):
    """How far below the F3 threshold a score may be and still pass (see the module docstring)."""
    return MARGIN_NATS + 2 * ROUNDING_PER_STEP * (
        np.asarray(lengths, dtype=np.float64) + np.asarray(M, dtype=np.float64)
    )


def passes_f3(scores, filter_scores, tau, lam, F3, margins):
    """`p7_Pipeline`'s Forward decision, P = esl_exp_surv((fwd − filtersc)/ln 2, τ, λ) ≤ F3, taken
    on the score plus its margin; non-finite scores pass."""
    bits = (np.asarray(scores, dtype=np.float64) + margins - filter_scores) / math.log(2.0)
    with np.errstate(over="ignore", invalid="ignore"):
        pvalues = np.where(bits < tau, 1.0, np.exp(-np.asarray(lam) * (bits - tau)))
    return ~np.isfinite(scores) | (pvalues <= F3)


def model_blob(profile, block=32):
    """The model's floats as fwd.cu reads them: 29 emission rows, then the eight transition rows,
    each padded with zeros to a whole number of `block`-node warp rows."""
    N = -(-profile.M // block) * block
    blob = np.zeros((profile.emissions.shape[0] + 8, N), dtype=np.float32)
    blob[: profile.emissions.shape[0], : profile.M] = profile.emissions
    blob[profile.emissions.shape[0] :, : profile.M] = profile.transitions
    return blob


#: fwd.cu's ForwardParameters, field for field (C layout: 8-byte aligned).
FORWARD_PARAMETERS = np.dtype([("e_move", "<f4"), ("e_loop", "<f4"), ("blocks", "<i4"), ("offset", "<i8")], align=True)


def launch_parameters(profiles):
    """What fwd.cu reads of `profiles` in one launch: their blobs end to end, and each one's
    parameters (its E moves, its blob's 32-node blocks and offset)."""
    blobs = [model_blob(profile) for profile in profiles]
    parameters = np.zeros(len(profiles), dtype=FORWARD_PARAMETERS)
    parameters["e_move"] = [profile.e_move for profile in profiles]
    parameters["e_loop"] = [profile.e_loop for profile in profiles]
    parameters["blocks"] = [blob.shape[1] // 32 for blob in blobs]
    parameters["offset"] = np.concatenate([[0], np.cumsum([blob.size for blob in blobs])[:-1]])
    return np.concatenate([b.reshape(-1) for b in blobs]), parameters
