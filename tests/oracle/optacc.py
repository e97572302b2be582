"""HMMER 3.4's optimal accuracy alignment (`impl_sse/optacc.c`): `p7_OptimalAccuracy` (the
max-plus fill over posterior probabilities) and `p7_OATrace` (its traceback), bit for bit.

The fill's only rounding is the float32 sum of a best predecessor and a posterior; maxima are
exact. Kept as HMMER has them: a transition that is zero masks its predecessor to +0.0 (SSE
`and` with `cmpgt`), not −∞; shifts bring −∞ into node 1; the first D→D pass carries each updated
cell, three more passes carry only the shifted carry; the special states test whether a
transition is 0.0 and then use 0.0 for that term. The traceback masks predecessors behind a zero
transition to −∞ and breaks ties as HMMER does: M, I, D, B in that order for M; M over D and M
over I (>=); C, J and B prefer the loop or N only when strictly better; E scans the striped cells
in order, a later M winning ties (>=) and a D only when strictly better.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuhmm.stages.tail.profile import BM, DD, DM, F32, II, IM, MD, MI, MM

from .fwdback import B, C, E, J, N, predecessors, rightshift
from .oprofile import cell, transition
from .trace import LOOPING, traced_back

NEG_INF = F32(-np.inf)
ZERO = F32(0.0)


@dataclasses.dataclass(frozen=True)
class OAMatrix:
    """The optimal accuracy matrix: M, D, I rows and the specials E, N, J, B, C (SCALE unused)."""

    M: np.ndarray  # float32 (L + 1, Q, 4)
    D: np.ndarray
    I: np.ndarray
    specials: np.ndarray  # float32 (L + 1, 6)


def optimal_accuracy(profile, xf, posteriors):
    """`p7_OptimalAccuracy`: the OA matrix of an envelope's posteriors and its score (the
    expected number of correctly aligned residues, C at row L)."""
    L, Q = posteriors.L, profile.Q
    open_ = profile.transitions > 0.0
    reach_dd = np.vstack([np.ones((1, 4), dtype=bool), np.logical_and.accumulate(open_[DD][:-1], axis=0)])
    OM, OD, OI = (np.full((L + 1, Q, 4), NEG_INF, dtype=F32) for _ in range(3))
    X = np.zeros((L + 1, 6), dtype=F32)
    X[0] = (NEG_INF, ZERO, NEG_INF, ZERO, NEG_INF, ZERO)
    for i in range(1, L + 1):
        sv = np.where(open_[BM], X[i - 1, B], ZERO)
        sv = np.maximum(sv, np.where(open_[MM], predecessors(OM[i - 1], NEG_INF), ZERO))
        sv = np.maximum(sv, np.where(open_[IM], predecessors(OI[i - 1], NEG_INF), ZERO))
        sv = np.maximum(sv, np.where(open_[DM], predecessors(OD[i - 1], NEG_INF), ZERO))
        sv = sv + posteriors.M[i]
        Ic = np.maximum(np.where(open_[MI], OM[i - 1], ZERO), np.where(open_[II], OI[i - 1], ZERO))
        OI[i] = Ic + posteriors.I[i]
        Dc = OD[i]
        Dc[1:] = np.where(open_[MD][:-1], sv[:-1], ZERO)
        dcv = rightshift(np.where(open_[MD][-1], sv[-1], ZERO), NEG_INF)
        for q in range(Q):
            Dc[q] = np.maximum(dcv, Dc[q])
            dcv = np.where(open_[DD][q], Dc[q], ZERO)
        for _ in range(3):
            dcv = rightshift(dcv, NEG_INF)
            carried = np.where(reach_dd, dcv, ZERO)
            Dc[:] = np.maximum(carried, Dc)
            dcv = np.where(open_[DD][-1], carried[-1], ZERO)
        OM[i] = sv
        xE = max(sv.max(), Dc.max())
        t1 = ZERO if xf.loop == 0.0 else X[i - 1, J] + posteriors.J[i]
        t2 = ZERO if xf.e_loop == 0.0 else xE
        xJ = t1 if t1 > t2 else t2
        t1 = ZERO if xf.loop == 0.0 else X[i - 1, C] + posteriors.C[i]
        t2 = ZERO if xf.e_move == 0.0 else xE
        xC = t1 if t1 > t2 else t2
        xN = ZERO if xf.loop == 0.0 else X[i - 1, N] + posteriors.N[i]
        t1 = ZERO if xf.move == 0.0 else xN
        t2 = ZERO if xf.move == 0.0 else xJ
        X[i, E], X[i, N], X[i, J], X[i, B], X[i, C] = xE, xN, xJ, t1 if t1 > t2 else t2, xC
    return OAMatrix(OM, OD, OI, X), X[L, C]


class _Chooser:
    """The deterministic `select_*` of `p7_OATrace` on an OA matrix."""

    def __init__(self, profile, xf, posteriors, oa):
        self.profile, self.xf, self.pp, self.oa = profile, xf, posteriors, oa

    def _masked(self, rows, i, k, kind, node):
        """Node k's cell in row i, or −∞ behind a zero transition `kind` of `node`."""
        return NEG_INF if transition(self.profile, kind, node) == 0.0 else cell(self.profile, rows, i, k)

    def m(self, i, k):
        path = [
            self._masked(self.oa.M, i - 1, k - 1, MM, k),
            self._masked(self.oa.I, i - 1, k - 1, IM, k),
            self._masked(self.oa.D, i - 1, k - 1, DM, k),
            NEG_INF if transition(self.profile, BM, k) == 0.0 else self.oa.specials[i - 1, B],
        ]
        best = 0
        for index in range(1, 4):
            if path[index] > path[best]:
                best = index
        return "MIDB"[best]

    def d(self, i, k):
        from_m = self._masked(self.oa.M, i, k - 1, MD, k - 1)
        return "M" if from_m >= self._masked(self.oa.D, i, k - 1, DD, k - 1) else "D"

    def i(self, i, k):
        from_m = self._masked(self.oa.M, i - 1, k, MI, k)
        return "M" if from_m >= self._masked(self.oa.I, i - 1, k, II, k) else "I"

    def c_or_j(self, state, i):
        column, emission = (C, self.pp.C) if state == "C" else (J, self.pp.J)
        looped = NEG_INF if self.xf.loop == 0.0 else self.oa.specials[i - 1, column] + emission[i]
        e_weight = self.xf.e_move if state == "C" else self.xf.e_loop
        from_e = NEG_INF if e_weight == 0.0 else self.oa.specials[i, E]
        return state if looped > from_e else "E"

    def b(self, i):
        from_n = NEG_INF if self.xf.move == 0.0 else self.oa.specials[i, N]
        from_j = NEG_INF if self.xf.move == 0.0 else self.oa.specials[i, J]
        return "N" if from_n > from_j else "J"

    def e(self, i):
        best, chosen = NEG_INF, None
        M, D, Q = self.oa.M[i], self.oa.D[i], self.profile.Q
        for q in range(Q):
            for z in range(4):
                if M[q, z] >= best:
                    best, chosen = M[q, z], ("M", z * Q + q + 1)
            for z in range(4):
                if D[q, z] > best:
                    best, chosen = D[q, z], ("D", z * Q + q + 1)
        return chosen

    def posterior(self, state, previous, k, i):
        """`get_postprob`: M and I their cell's posterior, N/C/J their row's when looping."""
        if state in "MI":
            return cell(self.profile, self.pp.M if state == "M" else self.pp.I, i, k)
        if state in LOOPING and state == previous:
            return {"N": self.pp.N, "C": self.pp.C, "J": self.pp.J}[state][i]
        return ZERO


def oa_trace(profile, xf, posteriors, oa):
    """`p7_OATrace`: the optimal accuracy path through `oa`, with each step's posterior."""
    return traced_back(_Chooser(profile, xf, posteriors, oa), posteriors.L, with_posteriors=True)
