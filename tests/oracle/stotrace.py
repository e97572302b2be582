"""HMMER 3.4's stochastic traceback (`impl_sse/stotrace.c`, `p7_StochasticTrace`) and the Easel
pieces it draws with: the fast generator (`esl_randomness_CreateFast`, `esl_random`),
`esl_vec_FNorm` and `esl_rnd_FChoose`, bit for bit.

A trace is sampled backward from C at row L through a full Forward matrix (`fwdback.forward`
with `full=True`). Each choice weighs its predecessors by float32 products of a Forward cell and a
transition (emissions are a common factor and left out; E's weights put its row scale back),
normalizes them with `esl_vec_FNorm` (Kahan-compensated float32 sum, then a float32 division),
and draws with `esl_rnd_FChoose` (one draw; the cumulative sum and its ratio to the double total
in double). E picks its M or D cell with one draw compared against a double running sum of the
cells times the float32 reciprocal of E(i), in striped order (q outer; M's four lanes, then D's),
sweeping again without resetting the sum if roundoff leaves the draw above it. N makes no draw.
"""

from __future__ import annotations

import numpy as np

from gpuhmm.stages.tail.profile import BM, DD, DM, F32, II, IM, MD, MI, MM

from .fwdback import SCALE, B, C, E, J, N
from .oprofile import cell, transition
from .trace import traced_back

_MASK32 = 0xFFFFFFFF


def mix3(a, b, c):
    """`esl_mix3`: Bob Jenkins' 96-bit mix of three uint32, giving the third."""
    for shift_a, shift_b, shift_c in ((13, 8, 13), (12, 16, 5), (3, 10, 15)):
        a = ((a - b - c) & _MASK32) ^ (c >> shift_a)
        b = ((b - c - a) & _MASK32) ^ ((a << shift_b) & _MASK32)
        c = ((c - a - b) & _MASK32) ^ (b >> shift_c)
    return c


class FastRandomness:
    """Easel's fast generator (`eslRND_FAST`): Knuth's x ← 69069·x + 1 mod 2³², started from
    `esl_mix3(seed, 87654321, 12345678)` (42 if that is 0)."""

    def __init__(self, seed):
        if seed == 0:
            raise ValueError("seed 0 asks Easel for an arbitrary seed: not reproducible")
        self.seed = seed
        self.reseed()

    def reseed(self):
        """`esl_randomness_Init(r, esl_randomness_GetSeed(r))`: back to the seeded state."""
        self.x = mix3(self.seed, 87654321, 12345678) or 42

    def random(self):
        """`esl_random`: the next state over 2³², a double in [0, 1)."""
        self.x = (self.x * 69069 + 1) & _MASK32
        return self.x / 4294967296.0


def kahan_sum(values):
    """`esl_vec_FSum`: Kahan-compensated float32 sum."""
    total, compensation = F32(0.0), F32(0.0)
    for value in values:
        y = value - compensation
        t = total + y
        compensation = (t - total) - y
        total = t
    return total


def normalized(path):
    """`esl_vec_FNorm`: the float32 weights over their sum (`kahan_sum`), or all 1/n when the sum
    is 0."""
    total = kahan_sum(path)
    if total == 0.0:
        return [F32(1.0) / F32(len(path))] * len(path)
    return [value / total for value in path]


def choose(rng, path):
    """`esl_rnd_FChoose`: index of the first cumulative weight (double) whose share of the total
    exceeds one draw."""
    roll = rng.random()
    norm = 0.0
    for value in path:
        norm += float(value)
    cumulative = 0.0
    for index, value in enumerate(path):
        cumulative += float(value)
        if roll < cumulative / norm:
            return index
    raise AssertionError("esl_rnd_FChoose: no choice (the weights are not finite)")


class _Sampler:
    """The `select_*` choices of `p7_StochasticTrace` on one full Forward matrix."""

    def __init__(self, rng, profile, xf, fwd):
        self.rng, self.profile, self.xf, self.fwd = rng, profile, xf, fwd
        self.x = fwd.specials

    def _pick(self, path, states):
        return states[choose(self.rng, normalized(path))]

    def m(self, i, k):
        f = self.fwd
        path = [
            self.x[i - 1, B] * transition(self.profile, BM, k),
            cell(self.profile, f.M, i - 1, k - 1) * transition(self.profile, MM, k),
            cell(self.profile, f.I, i - 1, k - 1) * transition(self.profile, IM, k),
            cell(self.profile, f.D, i - 1, k - 1) * transition(self.profile, DM, k),
        ]
        return self._pick(path, "BMID")

    def d(self, i, k):
        f = self.fwd
        path = [
            cell(self.profile, f.M, i, k - 1) * transition(self.profile, MD, k - 1),
            cell(self.profile, f.D, i, k - 1) * transition(self.profile, DD, k - 1),
        ]
        return self._pick(path, "MD")

    def i(self, i, k):
        f = self.fwd
        path = [
            cell(self.profile, f.M, i - 1, k) * transition(self.profile, MI, k),
            cell(self.profile, f.I, i - 1, k) * transition(self.profile, II, k),
        ]
        return self._pick(path, "MI")

    def c_or_j(self, state, i):
        """C (or J) at row i: it looped from row i−1, or came from E(i)."""
        loop_from = self.x[i - 1, C if state == "C" else J] * self.xf.loop
        e_weight = self.xf.e_move if state == "C" else self.xf.e_loop
        from_e = (self.x[i, E] * e_weight) * self.x[i, SCALE]
        return self._pick([loop_from, from_e], state + "E")

    def b(self, i):
        return self._pick([self.x[i, N] * self.xf.move, self.x[i, J] * self.xf.move], "NJ")

    def e(self, i):
        """(state, k) of the M or D cell that ended at E(i)."""
        roll = self.rng.random()
        weight = F32(1.0) / self.x[i, E]
        cells = np.stack([self.fwd.M[i] * weight, self.fwd.D[i] * weight], axis=1).reshape(-1).astype(np.float64)
        total = 0.0
        while True:
            sums = np.cumsum(np.concatenate([[total], cells]))[1:]
            above = np.flatnonzero(roll < sums)
            if above.size:
                q, rest = divmod(int(above[0]), 8)
                return ("M" if rest < 4 else "D"), (rest % 4) * self.profile.Q + q + 1
            total = float(sums[-1])


def stochastic_trace(rng, profile, xf, fwd):
    """`p7_StochasticTrace`: one path sampled from the full Forward matrix `fwd` of a region
    (multihit `xf`), as a `Trace` in the region's coordinates."""
    return traced_back(_Sampler(rng, profile, xf, fwd), fwd.L)
