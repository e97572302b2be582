"""HMMER 3.4's `p7_ForwardParser` in float64 numpy: the Forward filter kernel's reference.

Through it the kernel's F3 margin (`stages.fwdfilter.margin_nats`) is checked against pyhmmer.
"""

from __future__ import annotations

import numpy as np

from ...stages.fwdfilter import RESCALE_ABOVE, length_moves


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
