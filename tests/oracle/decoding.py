"""HMMER 3.4's posterior decoding (`impl_sse/decoding.c`): `p7_DomainDecoding` on the parser
matrices and `p7_Decoding` on full matrices, bit for bit.

Float rules kept: every product is float32 in HMMER's left-to-right order, e.g.
((F·B)·scale)·scaleproduct; the running scale product and the cumulative B and E occupancies are
sequential float32 (`accumulate`); `1.0 / N_b(0)` and `1. − njcp` are double operations rounded
once, which equal the float32 operations. When Backward kept its own scale factors, the scale
product is multiplied at each row by (Forward's factor ⊘ Backward's), as HMMER does.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuhmm.stages.tail.profile import F32

from .fwdback import SCALE, B, C, E, J, N, RangeError


def _scale_products(fwd, bck, first):
    """The scale product before each row's update: entry r is after the updates of rows
    `first`..`first`+r−1 (constant without Backward's own scale factors)."""
    start = F32(1.0) / bck.specials[0, N]
    rows = slice(first, first + fwd.L)
    if not bck.has_own_scales:
        return np.full(fwd.L + 1, start, dtype=F32)
    ratios = fwd.specials[rows, SCALE] / bck.specials[rows, SCALE]
    return np.multiply.accumulate(np.concatenate([[start], ratios]).astype(F32))


@dataclasses.dataclass(frozen=True)
class DomainPosteriors:
    """`ddef->btot`, `etot`, `mocc` for rows 0..L: expected B and E uses up to each residue, and
    each residue's probability of being emitted by the core model."""

    btot: np.ndarray  # float32 (L + 1,)
    etot: np.ndarray
    mocc: np.ndarray


def domain_decoding(xf, fwd, bck):
    """`p7_DomainDecoding` from the Forward and Backward parser matrices (multihit `xf`).
    Raises RangeError where the scale product overflows, as HMMER returns eslERANGE."""
    F, Bk = fwd.specials, bck.specials
    products = _scale_products(fwd, bck, first=0)  # updated with row i−1's factors at row i
    before, after = products[:-1], products[1:]
    b_terms = ((F[:-1, B] * Bk[:-1, B]) * F[:-1, SCALE]) * before
    e_terms = ((F[1:, E] * Bk[1:, E]) * F[1:, SCALE]) * after
    njcp = ((F[:-1, N] * Bk[1:, N]) * xf.loop) * after
    njcp = njcp + ((F[:-1, J] * Bk[1:, J]) * xf.loop) * after
    njcp = njcp + ((F[:-1, C] * Bk[1:, C]) * xf.loop) * after
    if np.isinf(products[-1]):
        raise RangeError("domain decoding scale product overflow")
    zero = np.zeros(1, dtype=F32)
    return DomainPosteriors(
        btot=np.add.accumulate(np.concatenate([zero, b_terms])),
        etot=np.add.accumulate(np.concatenate([zero, e_terms])),
        mocc=np.concatenate([zero, F32(1.0) - njcp]),
    )


@dataclasses.dataclass(frozen=True)
class Posteriors:
    """`p7_Decoding`'s posterior matrix: M and I per row (row 0 zero; D is always zero) and the
    N, J, C emission posteriors."""

    M: np.ndarray  # float32 (L + 1, Q, 4)
    I: np.ndarray
    N: np.ndarray  # float32 (L + 1,)
    J: np.ndarray
    C: np.ndarray

    @property
    def L(self):
        return self.M.shape[0] - 1


def decoding(xf, fwd, bck):
    """`p7_Decoding` from full Forward and Backward matrices; None where the scale product
    overflows (HMMER's eslERANGE, after which `rescore_isolated_domain` drops the envelope)."""
    F, Bk = fwd.specials, bck.specials
    products = _scale_products(fwd, bck, first=1)  # updated with row i's factors after row i
    if np.isinf(products[-1]):
        return None
    row_scale = (products[:-1] * F[1:, SCALE])[:, None, None]
    M, I = np.zeros_like(fwd.M), np.zeros_like(fwd.I)
    M[1:] = (fwd.M[1:] * bck.M[1:]) * row_scale
    I[1:] = (fwd.I[1:] * bck.I[1:]) * row_scale
    emission = {}
    for state in (N, J, C):
        emission[state] = np.zeros(fwd.L + 1, dtype=F32)
        emission[state][1:] = ((F[:-1, state] * Bk[1:, state]) * xf.loop) * products[:-1]
    return Posteriors(M=M, I=I, N=emission[N], J=emission[J], C=emission[C])
