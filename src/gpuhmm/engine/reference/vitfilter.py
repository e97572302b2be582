"""HMMER 3.4's `p7_ViterbiFilter` in numpy, and a numpy model of the Viterbi kernel's lanes.

* `viterbi_scores` is a numpy model of `impl_sse/vitfilter.c`: the same striped int16 vectors,
  saturating adds, the delayed M→D store and the Lazy-F D→D sweeps gated by `ddbound_w`, run for
  a batch of sequences in lock step. It is the oracle the GPU Viterbi kernel is checked against.
* `emulate` models kernels/vit.cu's arithmetic (Vit16's wrapping adds with their floors, or
  Vit32), and with it the claims of `stages.vitlayout`.
"""

from __future__ import annotations

import numpy as np

from ...stages.vitfilter import _C, _E, _J, _LOOP, _MOVE, _N, NEG_INF_WORD
from ...stages.vitlayout import (
    CELL_FLOOR,
    INFINITE_RESIDUES,
    NEEDS_EXACT,
    OK,
    OVERFLOW,
    kernel_parameters,
    kernel_values,
    sequence_moves,
)


def _adds(a, b):
    """`_mm_adds_epi16`."""
    return np.clip(a.astype(np.int32) + b, -32768, 32767).astype(np.int16)


def _shift_in(vectors):
    """`_mm_slli_si128(v, 2)` with −inf in lane 0: lane z takes lane z−1 (last axis)."""
    shifted = np.empty_like(vectors)
    shifted[..., 1:] = vectors[..., :-1]
    shifted[..., 0] = NEG_INF_WORD
    return shifted


def viterbi_scores(profile, sequences):
    """`p7_ViterbiFilter` scores (float32 nats; +inf on overflow) for digital sequences.

    `sequences` is a list of uint8 arrays of residue codes, run in lock step, longest first, each
    leaving the batch after its last row. Within a row every vector q depends only on the
    previous row, except for the D→D chain; so M, I and the delayed M→D values are computed for
    all q at once, and the Lazy-F sweeps are replaced by the closure they converge to, a max-plus
    prefix scan along the nodes (exact: D→D and M→D words are ≤ 0, so saturation is only ever
    the floor).
    """
    scores = np.full(len(sequences), -np.inf, dtype=np.float32)
    order = sorted(range(len(sequences)), key=lambda b: -len(sequences[b]))
    order = [b for b in order if len(sequences[b])]
    if not order:
        return scores
    lengths = np.array([len(sequences[b]) for b in order], dtype=np.int64)
    B, Q = len(order), profile.Q
    codes = np.zeros((B, int(lengths[0])), dtype=np.intp)
    for row, b in enumerate(order):
        codes[row, : lengths[row]] = sequences[b]
    bm, mm, im, dm, md, mi, ii = np.moveaxis(profile.twv[: 7 * Q].astype(np.int32).reshape(Q, 7, 8), 1, 0)
    dd_nodes = profile.twv[7 * Q :].astype(np.int64).T.reshape(-1)  # node order: k = z·Q + q + 1
    chain = np.concatenate([[0], np.cumsum(dd_nodes[:-1])])
    xw = profile.xw.astype(np.int64)
    move = np.array([profile.move_word(n) for n in lengths], dtype=np.int64)

    mmx = np.full((B, Q, 8), NEG_INF_WORD, np.int16)
    imx, dmx = mmx.copy(), mmx.copy()
    xN = np.full(B, profile.base_w, np.int64)
    xB = xN + move
    xJ = np.full(B, NEG_INF_WORD, np.int64)
    xC = xJ.copy()
    overflow = np.zeros(B, dtype=bool)
    for i in range(int(lengths[0])):
        n = int(np.count_nonzero(lengths > i))  # the sequences still running: a prefix
        mmx, imx, dmx, xN, xB, xJ, xC = mmx[:n], imx[:n], dmx[:n], xN[:n], xB[:n], xJ[:n], xC[:n]
        m_prev = np.concatenate([_shift_in(mmx[:, Q - 1])[:, None], mmx[:, :-1]], axis=1)
        i_prev = np.concatenate([_shift_in(imx[:, Q - 1])[:, None], imx[:, :-1]], axis=1)
        d_prev = np.concatenate([_shift_in(dmx[:, Q - 1])[:, None], dmx[:, :-1]], axis=1)
        entry = np.clip(xB, -32768, 32767).astype(np.int32)[:, None, None]
        sv = _adds(entry, bm)
        sv = np.maximum(sv, _adds(m_prev, mm))
        sv = np.maximum(sv, _adds(i_prev, im))
        sv = np.maximum(sv, _adds(d_prev, dm))
        mmx_next = _adds(sv, profile.rwv[codes[:n, i]].astype(np.int32))
        imx = np.maximum(_adds(mmx, mi), _adds(imx, ii))
        mmx = mmx_next
        to_d = _adds(mmx, md)  # vector q's M→D, stored into vector q+1 (the last one wraps)
        dmx = np.concatenate([_shift_in(to_d[:, Q - 1])[:, None], to_d[:, :-1]], axis=1)
        xE = mmx.max(axis=(1, 2)).astype(np.int64)
        overflow[:n] |= xE >= 32767  # HMMER stops here with +inf; later rows cannot clear it
        xN = xN + xw[_N, _LOOP]
        xC = np.maximum(xC + xw[_C, _LOOP], xE + xw[_E, _MOVE])
        xJ = np.maximum(xJ + xw[_J, _LOOP], xE + xw[_E, _LOOP])
        xB = np.maximum(xJ + move[:n], xN + move[:n])
        # Lazy-F runs only where a D→D path could still beat entering from B (vitfilter.c).
        lazy = to_d.max(axis=(1, 2)).astype(np.int64) + profile.ddbound_w > xB
        if lazy.any():
            nodes = dmx.transpose(0, 2, 1).reshape(n, -1).astype(np.int64)
            closed = np.maximum.accumulate(nodes - chain, axis=1) + chain
            closed = np.maximum(closed, NEG_INF_WORD).astype(np.int16).reshape(n, 8, Q).transpose(0, 2, 1)
            dmx = np.where(lazy[:, None, None], closed, dmx)
        ending = lengths[:n] == i + 1
        if ending.any():
            final = np.full(n, -np.inf, dtype=np.float32)
            finite = xC > NEG_INF_WORD
            nats = (xC.astype(np.float32) + move[:n].astype(np.float32) - np.float32(profile.base_w)) / np.float32(
                profile.scale_w
            )
            final[finite] = (nats[finite].astype(np.float64) - 3.0).astype(np.float32)
            final[overflow[:n]] = np.inf
            for row in np.nonzero(ending)[0]:
                scores[order[row]] = final[row]
    return scores


def emulate(profile, lanes, sequences, total_nodes=None):
    """A numpy model of vit.cu's arithmetic (node order; the striping is a permutation of it):
    returns (xC int64, status uint8) per sequence. The CI oracle for the lanes' exactness."""
    total_nodes = total_nodes or profile.M
    emissions, transitions = kernel_values(profile, lanes, total_nodes)
    p = kernel_parameters(profile)
    floor = CELL_FLOOR[lanes]
    wraps = lanes == "vit16"

    def addmax(a, b, c):
        total = a + b
        if wraps:
            total = (total + 32768) % 65536 - 32768
        return np.maximum(total, c)

    def shifted(cells):
        out = np.empty_like(cells)
        out[:, 1:] = cells[:, :-1]
        out[:, 0] = floor
        return out

    bm, mm, im, dm, md, mi, ii, dd = (row[None, :].astype(np.int64) for row in transitions)
    chain = np.concatenate([[0], np.cumsum(dd[0, :-1])])
    B = len(sequences)
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    moves = sequence_moves(profile, lengths).astype(np.int64)
    xc = np.full(B, NEG_INF_WORD, dtype=np.int64)
    status = np.zeros(B, dtype=np.uint8)
    for b in np.flatnonzero(lengths):
        seq = np.asarray(sequences[b], dtype=np.intp)
        move = moves[b]
        M = np.full((1, total_nodes), floor, np.int64)
        I, D = M.copy(), M.copy()
        xN, xJ, xC, xB = p.base, NEG_INF_WORD, NEG_INF_WORD, p.base + move
        dead = p.base + move + p.bm_min - 1
        needs_exact = wraps and dead < floor
        overflow = False
        for row, code in enumerate(seq):
            infinite = wraps and int(code) in INFINITE_RESIDUES
            needs_exact |= infinite and (row + 1 < len(seq) or max(p.base, xJ - p.e_loop) > dead + 32768)
            begin = min(max(xB, -32768), 32767)
            sv = addmax(shifted(D), dm, floor)
            sv = addmax(shifted(I), im, sv)
            sv = addmax(shifted(M), mm, sv)
            sv = addmax(begin, bm, sv)
            m = addmax(sv, emissions[code][None, :].astype(np.int64), floor)
            I = addmax(M, mi, addmax(I, ii, floor))
            M = m
            D = shifted(addmax(M, md, floor))
            D = np.maximum.accumulate(D - chain, axis=1) + chain
            x_e = floor if infinite else int(M.max())
            overflow |= x_e >= 32767
            needs_exact |= wraps and x_e > 32767 - p.e_max
            xC = max(xC, x_e + p.e_move)
            xJ = max(xJ, x_e + p.e_loop)
            xB = max(xJ + move, xN + move)
        xc[b] = xC
        status[b] = OVERFLOW if overflow else OK
        if wraps and (needs_exact or xC <= dead + p.e_move):
            status[b] = NEEDS_EXACT
    return xc, status
