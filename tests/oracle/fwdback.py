"""HMMER 3.4's Forward and Backward in probability space (`impl_sse/fwdback.c`): `p7_ForwardParser`
and `p7_Forward` (`forward_engine`), `p7_BackwardParser` and `p7_Backward` (`backward_engine`),
bit for bit.

The parsers keep only the special states of each row (E, N, J, B, C and the row's scale factor);
the full versions also keep every M, D, I row. The arithmetic is the same.

Float rules kept (pyhmmer runs HMMER without FTZ/DAZ and without FMA, so each numpy float32
operation here is one SSE operation there):

* The cells are HMMER's striped `__m128` vectors: array rows q = 0..Q−1 of 4 lanes. Every lane-wise
  product and sum is one float32 operation in HMMER's operand order. Where HMMER carries a
  vector from one q to the next, the order is kept: a running sum or product along q is numpy's
  `accumulate`, which adds or multiplies strictly in sequence; the first D→D pass, whose carry
  depends on the cell it updates, is a loop over q.
* Predecessors come through `esl_sse_rightshiftz_float` (node k−1 of vector 0 is lane z−1 of
  vector Q−1, zero for node 1), successors through the left shift `_mm_move_ss` + shuffle.
* Horizontal sums pair the lanes as HMMER's shuffles do: (a0 + a1) + (a2 + a3).
* Forward's D→D passes: always four below M = 100; from M = 100 on, HMMER stops after a pass that
  changed no cell (`_mm_cmpgt_ps`), which is data dependent and kept.
* Rescaling: Forward divides a row by xE when xE > 1e4 (specials by division, cells by a multiply
  with the float32 reciprocal) and adds glibc's double `log(xE)` to the float32 total;
  Backward reuses Forward's factors until its own xB exceeds 1e16 (compared in double), then keeps
  its own for the remaining rows (`has_own_scales`).
* The score is `totscale + log(xC · C→T)`, the sum in double, rounded once to float32.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gpuhmm.stages.tail.profile import BM, DD, DM, F32, II, IM, MD, MI, MM

#: Columns of `DPMatrix.specials` (p7X_E .. p7X_SCALE).
E, N, J, B, C, SCALE = range(6)


class RangeError(ArithmeticError):
    """HMMER's eslERANGE: a score overflowed or underflowed (pyhmmer raises; so does the reference)."""


@dataclasses.dataclass
class DPMatrix:
    """A `P7_OMX`: the special states of rows 0..L, and for full matrices the M, D, I rows."""

    specials: np.ndarray  # float32 (L + 1, 6): E, N, J, B, C, SCALE
    M: np.ndarray | None  # float32 (L + 1, Q, 4), full matrices only
    D: np.ndarray | None
    I: np.ndarray | None
    has_own_scales: bool

    @property
    def L(self):
        return self.specials.shape[0] - 1


def rightshift(vector, fill=0.0):
    """`esl_sse_rightshift(z)`: [a0 a1 a2 a3] → [fill a0 a1 a2]."""
    return np.concatenate([np.array([fill], dtype=F32), vector[:3]])


def leftshift(vector):
    """`_mm_move_ss(v, 0)` + shuffle(0,3,2,1): [a0 a1 a2 a3] → [a1 a2 a3 0]."""
    return np.concatenate([vector[1:], np.zeros(1, dtype=F32)])


def predecessors(rows, fill=0.0):
    """Each lane's node k−1, for all vectors: vector q−1, and for q = 0 the right-shifted Q−1."""
    shifted = np.empty_like(rows)
    shifted[1:] = rows[:-1]
    shifted[0] = rightshift(rows[-1], fill)
    return shifted


def successors(rows):
    """Each lane's node k+1: vector q+1, and for q = Q−1 the left-shifted vector 0."""
    shifted = np.empty_like(rows)
    shifted[:-1] = rows[1:]
    shifted[-1] = leftshift(rows[0])
    return shifted


def hsum(vector):
    """`esl_sse_hsum_ps`: (a0 + a1) + (a2 + a3) in float32."""
    return (vector[0] + vector[1]) + (vector[2] + vector[3])


def _check(value, what):
    if np.isnan(value):
        raise RangeError(f"{what} score is NaN")
    if value == 0.0:
        raise RangeError(f"{what} score underflow (is 0.0)")
    if np.isinf(value):
        raise RangeError(f"{what} score overflow (is infinity)")


def _forward_dd(D, dcv, tDD, stop_early):
    """The D→D paths of one Forward row, in place: one pass extending the full D (the carry is each
    updated cell times DD), then up to three passes extending only the carry; with `stop_early`
    (M ≥ 100) HMMER stops after a pass that raised no cell."""
    for q in range(D.shape[0]):
        D[q] = dcv + D[q]
        dcv = D[q] * tDD[q]
    for _ in range(3):
        carried = np.multiply.accumulate(np.vstack([rightshift(dcv), tDD[:-1]]), axis=0)
        updated = carried + D
        changed = bool((updated > D).any())
        D[:] = updated
        dcv = carried[-1] * tDD[-1]
        if stop_early and not changed:
            break


def forward(profile, residues, xf, full=False):
    """`p7_Forward` (full) or `p7_ForwardParser` of digital `residues` (one row per residue):
    the matrix and the Forward score in nats (float32)."""
    L, Q = len(residues), profile.Q
    t = profile.transitions
    specials = np.zeros((L + 1, 6), dtype=F32)
    rows = [np.zeros((L + 1, Q, 4), dtype=F32) for _ in range(3)] if full else [None] * 3
    Mp, Dp, Ip = (np.zeros((Q, 4), dtype=F32) for _ in range(3))
    xN, xJ, xC, xB = F32(1.0), F32(0.0), F32(0.0), xf.move
    specials[0] = (0.0, xN, xJ, xB, xC, 1.0)
    totscale = F32(0.0)
    for i in range(1, L + 1):
        sv = xB * t[BM]
        sv = sv + predecessors(Mp) * t[MM]
        sv = sv + predecessors(Ip) * t[IM]
        sv = sv + predecessors(Dp) * t[DM]
        sv = sv * profile.emissions[residues[i - 1]]
        Ic = Mp * t[MI] + Ip * t[II]
        Dc = np.zeros((Q, 4), dtype=F32)
        Dc[1:] = sv[:-1] * t[MD][:-1]  # M(k)→D(k+1), stored one vector later
        _forward_dd(Dc, rightshift(sv[-1] * t[MD][-1]), t[DD], profile.M >= 100)
        xE = hsum(np.add.accumulate(np.vstack([sv, Dc]), axis=0)[-1])  # M's in q order, then D's
        xN = xN * xf.loop
        xC = (xC * xf.loop) + (xE * xf.e_move)
        xJ = (xJ * xf.loop) + (xE * xf.e_loop)
        xB = (xJ * xf.move) + (xN * xf.move)
        scale = F32(1.0)
        if xE > F32(1.0e4):
            xN, xC, xJ, xB = xN / xE, xC / xE, xJ / xE, xB / xE
            reciprocal = F32(1.0) / xE
            sv, Dc, Ic = sv * reciprocal, Dc * reciprocal, Ic * reciprocal
            totscale = F32(float(totscale) + math.log(float(xE)))
            scale, xE = xE, F32(1.0)
        specials[i] = (xE, xN, xJ, xB, xC, scale)
        Mp, Dp, Ip = sv, Dc, Ic
        if full:
            rows[0][i], rows[1][i], rows[2][i] = sv, Dc, Ic
    if L > 0:
        _check(xC, "forward")
    score = F32(float(totscale) + math.log(float(xC * xf.move)))
    return DPMatrix(specials, *rows, has_own_scales=True), score


def _backward_dd(D, dcv, tDD):
    """Backward's three D→D passes after the first: the carry runs q = Q−1..0, each step times DD
    and added to the cell."""
    reversed_dd = tDD[::-1]
    for _ in range(3):
        carried = np.multiply.accumulate(np.vstack([leftshift(dcv), reversed_dd]), axis=0)[1:]
        D += carried[::-1]
        dcv = carried[-1]


def _rescale(cells, factor):
    reciprocal = F32(1.0) / factor
    for rows in cells:
        rows *= reciprocal


def backward(profile, residues, xf, fwd, full=False):
    """`p7_Backward` (full) or `p7_BackwardParser`: the Backward matrix, using the scale factors of
    `fwd` (the Forward matrix of the same residues) until it needs its own."""
    L, Q = len(residues), profile.Q
    t = profile.transitions
    succ_tMM, succ_tIM, succ_tDM = successors(t[MM]), successors(t[IM]), successors(t[DM])
    specials = np.zeros((L + 1, 6), dtype=F32)
    rows = [np.zeros((L + 1, Q, 4), dtype=F32) for _ in range(3)] if full else [None] * 3
    fwd_scale = fwd.specials[:, SCALE]

    # Row L: every M and D may end at E (padded lanes too), then D→D and M→D.
    xJ = xB = xN = F32(0.0)
    xC = xf.move
    xE = xC * xf.e_move
    Mc, Dc, Ic = np.full((Q, 4), xE, dtype=F32), np.full((Q, 4), xE, dtype=F32), np.zeros((Q, 4), dtype=F32)
    dpv = leftshift(Dc[-1])  # HMMER shifts vector Q−1 here: equal to vector 0, all lanes xE
    for q in range(Q - 1, -1, -1):
        dcv = dpv * t[DD][q]
        Dc[q] = Dc[q] + dcv
        dpv = Dc[q]
    _backward_dd(Dc, dcv, t[DD])
    Mc = Mc + successors(Dc) * t[MD]
    own_scales = False
    scale = fwd_scale[L]
    if scale > F32(1.0):
        xE, xN, xC, xJ, xB = xE / scale, xN / scale, xC / scale, xJ / scale, xB / scale
        _rescale((Mc, Dc, Ic), scale)
    specials[L] = (xE, xN, xJ, xB, xC, scale)
    if full:
        rows[0][L], rows[1][L], rows[2][L] = Mc, Dc, Ic

    for i in range(L - 1, 0, -1):
        emitted = Mc * profile.emissions[residues[i]]  # M(i+1) · e(x_{i+1})
        next_emitted = successors(emitted)
        Ic, Dc, Mc = (
            (Ic * t[II]) + (next_emitted * succ_tIM),
            next_emitted * succ_tDM,
            (Ic * t[MI]) + (next_emitted * succ_tMM),
        )
        xB = hsum(np.add.accumulate((emitted * t[BM])[::-1], axis=0)[-1])  # q = Q−1 down to 0
        xC = xC * xf.loop
        xJ = (xB * xf.move) + (xJ * xf.loop)
        xN = (xB * xf.move) + (xN * xf.loop)
        xE = (xC * xf.e_move) + (xJ * xf.e_loop)
        dpv = leftshift(Dc[0] + xE)
        for q in range(Q - 1, -1, -1):
            dcv = dpv * t[DD][q]
            Dc[q] = Dc[q] + (dcv + xE)
            dpv = Dc[q]
        Mc = Mc + xE
        _backward_dd(Dc, dcv, t[DD])
        Mc = Mc + successors(Dc) * t[MD]
        own_scales = own_scales or float(xB) > 1.0e16
        scale = (xB if xB > F32(1.0e4) else F32(1.0)) if own_scales else fwd_scale[i]
        if scale > F32(1.0):
            xE, xN, xJ, xB, xC = xE / scale, xN / scale, xJ / scale, xB / scale, xC / scale
            _rescale((Mc, Dc, Ic), scale)
        specials[i] = (xE, xN, xJ, xB, xC, scale)
        if full:
            rows[0][i], rows[1][i], rows[2][i] = Mc, Dc, Ic

    # Row 0: only B and N, from M(1); the sum runs q upward here.
    terms = (Mc * profile.emissions[residues[0]]) * t[BM]
    xB = hsum(np.add.accumulate(terms, axis=0)[-1])
    xN = (xB * xf.move) + (xN * xf.loop)
    specials[0] = (0.0, xN, 0.0, xB, 0.0, 1.0)
    if L > 0:
        _check(xN, "backward")
    return DPMatrix(specials, *rows, has_own_scales=own_scales)
