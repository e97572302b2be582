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

#: Row of `xf`: E, N, J, C; column: MOVE, LOOP (p7O_XSTATES, p7O_XTRANSITIONS).
_E, _MOVE, _LOOP = 0, 0, 1
#: HMMER rescales a row when its xE passes this ("sparse rescaling").
RESCALE_ABOVE = 1.0e4
#: The F3 margin's fixed part, in nats (one bit), and the rounding slope per DP step.
MARGIN_NATS = math.log(2.0)
ROUNDING_PER_STEP = 16 * 2.0 ** -24
TRANSITION_KINDS = ("BM", "MM", "IM", "DM", "MD", "MI", "II", "DD")


@dataclasses.dataclass(frozen=True)
class ForwardProfile:
    """One model's Forward-filter parameters in node order, as HMMER's optimized profile holds them."""

    name: str
    M: int
    emissions: np.ndarray  # float32 (Kp, M): rfv, odds ratio of residue x at node k (column k − 1)
    transitions: np.ndarray  # float32 (8, M): TRANSITION_KINDS of node k at column k − 1, as twv
    e_move: float  # float32: E → C
    e_loop: float  # float32: E → J
    nj: float  # expected J uses, for the per-length N/J/C words
    tau: float  # Forward exponential tail location (FTAU)
    lam: float  # Forward exponential tail slope (FLAMBDA)

    @classmethod
    def from_h3p(cls, data, hmm):
        """From the `.h3p` bytes `OptimizedProfile.write` gives (see vitfilter.profile_bytes)."""
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
        transitions[7] = tfv[7 * Q:][q, z]
        parameters = hmm.evalue_parameters.as_vector()
        return cls(
            name=hmm.name, M=M, emissions=np.ascontiguousarray(rfv[:, q, z], dtype=np.float32),
            transitions=transitions, e_move=float(xf[_E, _MOVE]), e_loop=float(xf[_E, _LOOP]), nj=nj,
            tau=float(np.float32(parameters[4])), lam=float(np.float32(parameters[5])),
        )


def length_moves(nj, lengths):
    """`ReconfigRestLength`'s float32 N/J/C MOVE probability per target length (LOOP = 1 − MOVE)."""
    nj = np.float32(nj)
    return (np.float32(2.0) + nj) / (np.asarray(lengths, dtype=np.float32) + np.float32(2.0) + nj)


def _affine_closure(a, b):
    """D_k = a_k·D_(k−1) + b_k along the last axis from D_0 = 0: a Hillis–Steele scan of the
    affine maps (every term is non-negative, so no cancellation)."""
    a, b = a.copy(), b.copy()
    offset = 1
    while offset < a.shape[-1]:
        b[..., offset:] += a[..., offset:] * b[..., :-offset]
        a[..., offset:] *= a[..., :-offset]
        offset *= 2
    return b


def forward_scores(profile, sequences):
    """`p7_ForwardParser` scores (float64 nats) for digital sequences, computed in float64.

    The reference the GPU kernel is checked against, and through which the kernel's margin is
    checked against pyhmmer. Sequences run in lock step, longest first.
    """
    scores = np.full(len(sequences), -np.inf)
    order = [b for b in sorted(range(len(sequences)), key=lambda b: -len(sequences[b])) if len(sequences[b])]
    if not order:
        return scores
    lengths = np.array([len(sequences[b]) for b in order], dtype=np.int64)
    codes = np.zeros((len(order), int(lengths[0])), dtype=np.intp)
    for row, b in enumerate(order):
        codes[row, : lengths[row]] = sequences[b]
    bm, mm, im, dm, md, mi, ii, dd = profile.transitions.astype(np.float64)
    emissions = profile.emissions.astype(np.float64)
    move = length_moves(profile.nj, lengths).astype(np.float64)
    loop = (np.float32(1.0) - length_moves(profile.nj, lengths)).astype(np.float64)
    B, M = len(order), profile.M
    Mc, Ic, Dc = (np.zeros((B, M)) for _ in range(3))
    xN, xJ, xC = np.ones(B), np.zeros(B), np.zeros(B)
    xB = move.copy()
    totscale = np.zeros(B)

    def shifted(cells):
        return np.concatenate([np.zeros((len(cells), 1)), cells[:, :-1]], axis=1)

    for i in range(int(lengths[0])):
        n = int(np.count_nonzero(lengths > i))
        Mc, Ic, Dc, xN, xJ, xC, xB = Mc[:n], Ic[:n], Dc[:n], xN[:n], xJ[:n], xC[:n], xB[:n]
        m = (xB[:, None] * bm + shifted(Mc) * mm + shifted(Ic) * im + shifted(Dc) * dm) * emissions[codes[:n, i]]
        Ic = Mc * mi + Ic * ii
        Mc = m
        Dc = _affine_closure(np.broadcast_to(shifted(dd[None, :]), Mc.shape), shifted(Mc * md))
        xE = Mc.sum(axis=1) + Dc.sum(axis=1)
        xN = xN * loop[:n]
        xC = xC * loop[:n] + xE * profile.e_move
        xJ = xJ * loop[:n] + xE * profile.e_loop
        xB = xJ * move[:n] + xN * move[:n]
        big = xE > RESCALE_ABOVE
        if big.any():
            r = np.where(big, 1.0 / np.where(big, xE, 1.0), 1.0)
            Mc, Ic, Dc = Mc * r[:, None], Ic * r[:, None], Dc * r[:, None]
            xN, xC, xJ, xB = xN * r, xC * r, xJ * r, xB * r
            totscale[:n] += np.log(np.where(big, xE, 1.0))
        for row in np.flatnonzero(lengths[:n] == i + 1).tolist():
            with np.errstate(divide="ignore"):
                scores[order[row]] = totscale[row] + np.log(xC[row] * move[row])
    return scores


def margin_nats(lengths, M):
    """How far below the F3 threshold a score may be and still pass (see the module docstring)."""
    return MARGIN_NATS + 2 * ROUNDING_PER_STEP * (np.asarray(lengths, dtype=np.float64) + np.asarray(M, dtype=np.float64))


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
    blob[profile.emissions.shape[0]:, : profile.M] = profile.transitions
    return blob
