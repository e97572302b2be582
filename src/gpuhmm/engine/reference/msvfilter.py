"""A numpy model of the MSV/SSV kernels: same warp blocks, same striped tables, same lanes.

It is the CI oracle for everything the GPU kernels do except run on a GPU: it reads the
warp-block bytes and the striped table bytes the kernels read, keeps each thread's H words
of W cells, moves the diagonal across threads as the warp shuffle does (thread t takes word
H−1 of thread t−1; thread 0 takes thread L−1's, one subword up, with −inf shifted in), and
follows the END/PAD protocol. Arithmetic is the kernels' own: 16-bit lanes without the
saturations the kernels prove redundant, or 8-bit saturating lanes. Slow, so for tests.

Outputs match `gpu`'s: SSV gives the best diagonal score per (model, sequence), capped at
255; MSV gives the final xJ byte or `msvfilter.MSV_OVERFLOW`.
"""

from __future__ import annotations

import numpy as np

from ...stages.msvfilter import END_CODE, MSV_OVERFLOW, TABLE_ROWS
from ...stages.msvlayout import ROW_BYTES, table_words


def unstripe_gains(table_bytes, striping):
    """Table bytes → per-residue cell increments shaped (rows, L threads, W subwords, H words)."""
    s = striping
    dtype = {1: np.uint8, 2: np.int16}[s.cell_bytes]
    rows = np.asarray(table_bytes).reshape(TABLE_ROWS, s.row_bytes)[:, : s.nodes * s.cell_bytes]
    values = np.ascontiguousarray(rows).view(dtype).astype(np.int32)
    gains = np.zeros((TABLE_ROWS, s.L, s.W, s.H), dtype=np.int32)
    position = 0
    t = np.arange(s.L)[None, :, None, None]
    w = np.arange(s.W)[None, None, None, :]
    for h in table_words(s):
        size = h.size
        region = values[:, position : position + size].reshape((TABLE_ROWS,) + h.shape)
        gains[:, np.broadcast_to(t, h.shape), np.broadcast_to(w, h.shape), h] = region
        position += size
    return gains


def column_residues(blocks, row):
    """Residue codes of every column (warp·S + c) at `row`; PAD past a warp's height."""
    per_row = ROW_BYTES // blocks.S
    columns = np.arange(blocks.S)
    at = blocks.block_start[:, None] + (row // per_row) * ROW_BYTES + columns[None, :] * per_row + row % per_row
    inside = (row < blocks.heights)[:, None]
    codes = np.where(inside, blocks.data[np.minimum(at, len(blocks.data) - 1)], 29)
    return codes.reshape(-1)


def _diagonal_predecessors(cells):
    """Each cell's node − 1 of the previous row: in-thread word shift plus the warp shuffle."""
    predecessors = np.empty_like(cells)
    predecessors[..., 1:] = cells[..., :-1]
    last = cells[..., -1]  # (columns, L, W)
    from_left = np.roll(last, 1, axis=1)  # shuffle from thread t−1 (thread 0 gets thread L−1)
    thread0 = np.zeros_like(last[:, 0, :])
    thread0[:, 1:] = last[:, -1, :-1]  # thread 0: one subword up, −inf (0) shifted in
    from_left[:, 0, :] = thread0
    predecessors[..., 0] = from_left
    return predecessors


def run_ssv(blocks, table_bytes, striping, arithmetic, bias, sequences):
    """Best diagonal score per sequence for one model (uint8, capped at 255)."""
    gains = unstripe_gains(table_bytes, striping)
    columns = blocks.warps * blocks.S
    cells = np.zeros((columns, striping.L, striping.W, striping.H), dtype=np.int32)
    best = np.zeros(columns, dtype=np.int32)
    out = np.zeros(sequences, dtype=np.uint8)
    cursor = blocks.column_start[:-1].astype(np.int64).copy()
    for row in range(int(blocks.heights.max(initial=0))):
        codes = column_residues(blocks, row)
        step = _diagonal_predecessors(cells)
        if arithmetic == "simd8":
            step = np.maximum(np.minimum(step + bias, 255) - gains[codes], 0)
        else:
            step = np.maximum(step + gains[codes], 0)
        cells = step
        best = np.maximum(best, cells.reshape(columns, -1).max(axis=1))
        ended = np.flatnonzero(codes == END_CODE)
        if len(ended):
            out[blocks.column_sequences[cursor[ended]]] = np.minimum(best[ended], 255)
            cursor[ended] += 1
            best[ended] = 0
            cells[ended] = 0
    return out


def run_msv(blocks, table_bytes, striping, arithmetic, model, tjbm, sequences):
    """Final xJ per sequence (or MSV_OVERFLOW) for one model; `tjbm[i]` = tjb(L_i) + tbm."""
    gains = unstripe_gains(table_bytes, striping)
    columns = blocks.warps * blocks.S
    cells = np.zeros((columns, striping.L, striping.W, striping.H), dtype=np.int32)
    out = np.zeros(sequences, dtype=np.int16)
    cursor = blocks.column_start[:-1].astype(np.int64).copy()
    has_sequence = cursor < blocks.column_start[1:]
    current = np.where(has_sequence, blocks.column_sequences[np.minimum(cursor, len(blocks.column_sequences) - 1)], 0)
    x_j = np.zeros(columns, dtype=np.int32)
    x_b = model.base - tjbm[current].astype(np.int32)
    overflow = np.zeros(columns, dtype=bool)
    for row in range(int(blocks.heights.max(initial=0))):
        codes = column_residues(blocks, row)
        start = np.maximum(_diagonal_predecessors(cells), x_b[:, None, None, None])
        if arithmetic == "simd8":
            cells = np.maximum(np.minimum(start + model.bias, 255) - gains[codes], 0)
        else:
            cells = np.maximum(start + gains[codes], 0)
        x_e = cells.reshape(columns, -1).max(axis=1)
        overflow |= x_e + model.bias >= 255
        x_j = np.maximum(x_j, np.maximum(x_e - model.tec, 0))
        x_b = np.maximum(model.base, x_j) - tjbm[current]
        ended = np.flatnonzero(codes == END_CODE)
        if len(ended):
            out[blocks.column_sequences[cursor[ended]]] = np.where(overflow[ended], MSV_OVERFLOW, x_j[ended])
            cursor[ended] += 1
            more = cursor[ended] < blocks.column_start[1:][ended]
            nxt = np.where(
                more, blocks.column_sequences[np.minimum(cursor[ended], len(blocks.column_sequences) - 1)], 0
            )
            current[ended] = nxt
            cells[ended] = 0
            x_j[ended] = 0
            overflow[ended] = False
            x_b[ended] = model.base - tjbm[nxt]
    return out


def run_msv_pair(model, sequence, tjbm):
    """kernels/msvpairs.cu for one (model, sequence) pair, in node order: the final xJ, or
    MSV_OVERFLOW; `tjbm` = tjb(L) + tbm."""
    gains = model.bias - model.costs.astype(np.int64)
    cells = np.zeros(model.M, dtype=np.int64)
    x_j, x_b, overflow = 0, model.base - int(tjbm), False
    for code in np.asarray(sequence, dtype=np.intp):
        predecessors = np.concatenate([[0], cells[:-1]])
        cells = np.maximum(np.maximum(predecessors, x_b) + gains[code], 0)
        x_e = int(cells.max())
        overflow |= x_e + model.bias >= 255
        x_j = max(x_j, max(x_e - model.tec, 0))
        x_b = max(model.base, x_j) - int(tjbm)
    return MSV_OVERFLOW if overflow else x_j
