"""The data layouts the MSV/SSV kernels read: warp sequence blocks and striped cost tables.

Warp sequence blocks (CUDAMPF++ §3.2, Algorithm 1). A warp aligns S sequences at once, one per
group of 32/S threads. Sequences are dealt longest first into N·S columns, back and forth
(columns 0…N·S−1, then N·S−1…0, …): with the lengths sorted, this keeps the columns as even as
Algorithm 1's greedy packing does, and it is a few numpy operations even for millions of
sequences, where the greedy heap was a Python loop. Each sequence is
followed by END ('@'); each warp's S columns are padded with PAD ('#') to the warp's height,
a multiple of 4. Column c of warp w, residue row r, lives at byte

    block_start[w] + (r // R) * 128 + c * R + r % R,       R = 128 / S,

so one 128-byte row holds R consecutive residues of every column: a thread reads its column
four residues at a time, and a warp's reads of a row coalesce into one transaction. The host
computes where each sequence goes; the GPU engine writes the bytes on the device
(kernels/layout.cu), so a shard's layouts never cross the bus.

Striped cost tables. A thread holds H words of W cells (W = 2 for 16-bit lanes, 4 for 8-bit).
Lane z = w·L + t (subword w of thread t, L threads per sequence) holds nodes k = z·H + h + 1,
h = 0..H-1: HMMER's striping with 2L or 4L vector lanes instead of 16, so the diagonal
predecessor of word 0 is word H−1 one lane down (a warp shuffle). A table row (one residue)
is stored as 16-byte chunks, chunk j of thread t at (j·L + t)·16, so each thread fetches
its cells for 16/(W·bytes) words with one 128-bit load and a group's loads are contiguous;
words that do not fill a chunk follow in 4-byte units, so H need only fill whole units.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .._memo import memoized
from .msvfilter import END_CODE, PAD_CODE, TABLE_ROWS

ROW_BYTES = 128


@dataclasses.dataclass(frozen=True, eq=False)
class WarpBlocks:
    """A database shard laid out for warps that align `S` sequences each.

    The layout is described by per-warp and per-column arrays; its bytes are written where they
    are read: on the device by kernels/layout.cu from the resident residues, or on the host by
    `data` (the numpy reference).
    """

    S: int
    block_start: np.ndarray  # int64 per warp: byte offset of its block
    heights: np.ndarray  # int32 per warp: residue rows
    column_start: np.ndarray  # int32 per column (warp·S + c): first entry in `column_sequences`
    column_sequences: np.ndarray  # int32: sequence indices, column by column, in row order
    sequence_row: np.ndarray  # int64 per entry of `column_sequences`: its first row in its column
    size: int  # bytes of all warps' blocks end to end
    residues: int
    source: tuple  # (residues, offsets) of the shard the blocks lay out

    @property
    def warps(self):
        return len(self.heights)

    @property
    def sequence_column(self):
        """The column (warp·S + c) of each entry of `column_sequences`."""
        return np.repeat(np.arange(len(self.column_start) - 1, dtype=np.int32), np.diff(self.column_start))

    @functools.cached_property
    def data(self):
        """The layout's bytes on the host: what kernels/layout.cu writes on the device."""
        residues, offsets = self.source
        members = self.column_sequences.astype(np.int64)
        lengths = offsets[members + 1] - offsets[members]
        rows = lengths + 1  # the sequence and its END
        entry = np.repeat(np.arange(len(members)), rows)
        r = np.arange(int(rows.sum())) - np.repeat(np.cumsum(rows) - rows, rows)
        warp, c = np.divmod(self.sequence_column.astype(np.int64)[entry], self.S)
        row = self.sequence_row[entry] + r
        per_row = ROW_BYTES // self.S
        at = self.block_start[warp] + (row // per_row) * ROW_BYTES + c * per_row + row % per_row
        inside = r < lengths[entry]
        data = np.full(self.size, PAD_CODE, dtype=np.uint8)
        data[at] = np.where(inside, residues[np.where(inside, offsets[members][entry] + r, 0)], END_CODE)
        return data


def build_warp_blocks(residues, offsets, S, warps):
    """Lay out sequences (`residues` end to end, `offsets` n + 1) for `warps` warps of S columns.

    Sequences of length zero are left out: HMMER's pipeline skips them.
    """
    if ROW_BYTES % S or ROW_BYTES // S < 4:
        raise ValueError(f"S={S}: a row holds 128/S residues per column, at least 4")
    lengths = np.diff(offsets).astype(np.int64)
    order = np.argsort(-lengths, kind="stable")
    order = order[lengths[order] > 0]
    columns = warps * S
    rank = np.arange(len(order))
    position = rank % columns
    column = np.where((rank // columns) % 2 == 0, position, columns - 1 - position)
    by_column = np.lexsort((rank, column))  # each column's sequences in the order dealt
    members = order[by_column]
    member_column = column[by_column]
    rows = lengths[members] + 1  # the sequence and its END
    column_start = np.searchsorted(member_column, np.arange(columns + 1))
    ahead = np.cumsum(rows) - rows  # rows of the columns' text before each sequence
    sequence_row = ahead - ahead[column_start[member_column]]
    heights_by_column = np.bincount(member_column, weights=rows, minlength=columns).astype(np.int64)
    heights = -(-heights_by_column.reshape(warps, S).max(axis=1) // 4) * 4
    per_row = ROW_BYTES // S
    block_bytes = -(-heights // per_row) * ROW_BYTES
    block_start = np.concatenate([[0], np.cumsum(block_bytes)])
    return WarpBlocks(
        S=S,
        block_start=block_start[:-1].astype(np.int64),
        heights=heights.astype(np.int32),
        column_start=column_start.astype(np.int32),
        column_sequences=members.astype(np.int32),
        sequence_row=sequence_row.astype(np.int64),
        size=int(block_start[-1]),
        residues=int(lengths.sum()),
        source=(residues, offsets),
    )


@dataclasses.dataclass(frozen=True)
class Striping:
    """How one kernel specialization lays a model over a warp's threads."""

    S: int  # sequences per warp
    H: int  # words per thread
    W: int  # cells per 32-bit word: 2 (16-bit lanes) or 4 (8-bit lanes)

    @property
    def L(self):
        return 32 // self.S

    @property
    def lanes(self):
        return self.L * self.W

    @property
    def nodes(self):
        return self.lanes * self.H

    @property
    def cell_bytes(self):
        """A table word holds one register's cells: int16 gains or uint8 costs."""
        return 4 // self.W

    @property
    def chunks(self):
        """16-byte (four-word) loads per thread; the H mod 4 words left are loaded singly."""
        return self.H // 4

    @property
    def replicas(self):
        """Copies of the table in shared memory, one per group of a quarter-warp.

        A 128-bit shared load is served a quarter-warp (8 threads) at a time. With L < 8 those
        8 threads are 8/L groups reading rows of different residues, which would collide in
        the banks; each group reads its own copy, skewed by L·16 bytes, so they never do.
        """
        return 8 // self.L if self.L < 8 else 1

    @property
    def row_bytes(self):
        """Bytes per residue row: 16-byte aligned rows, or whole 128-byte bank lines when the
        table is replicated (so the skew alone sets each copy's bank offset)."""
        align = 128 if self.replicas > 1 else 16
        return -(-self.nodes * self.cell_bytes // align) * align

    @property
    def shared_bytes(self):
        """Shared memory a CTA needs for the table copies (msv.cu computes the same)."""
        skew = self.L * 16 if self.replicas > 1 else 0
        return (self.replicas - 1) * (TABLE_ROWS * self.row_bytes + skew) + TABLE_ROWS * self.row_bytes


def table_words(striping):
    """Word index h of each table cell in storage order, shaped (groups, L, words, W).

    Storage is 16-byte chunks, chunk j of thread t at (j·L + t)·16, then the words left over,
    word u of thread t at chunks·L·16 + (u·L + t)·4.
    """
    s = striping
    regions = []
    for count, words, first in ((s.chunks, 4, 0), (s.H - 4 * s.chunks, 1, 4 * s.chunks)):
        group = np.arange(count)[:, None, None, None]
        word = np.arange(words)[None, None, :, None]
        h = first + group * words + word + np.zeros((1, s.L, 1, s.W), dtype=np.int64)
        regions.append(h)
    return regions


def stripe_table(values, striping, fill):
    """`values` (rows, M) per node → the striped table bytes (rows, row_bytes), `fill` past M."""
    s = striping
    rows, M = values.shape
    if M > s.nodes:
        raise ValueError(f"model of {M} nodes does not fit {s.nodes} lanes×words")
    padded = np.full((rows, s.nodes), fill, dtype=values.dtype)
    padded[:, :M] = values
    table = np.zeros((rows, s.row_bytes), dtype=np.uint8)
    table[:, : s.nodes * s.cell_bytes] = (
        np.ascontiguousarray(padded[:, _storage_order(s)]).view(np.uint8).reshape(rows, -1)
    )
    return table


@functools.cache
def _storage_order(striping):
    """The node index (0-based) of each table cell in storage order; the same for every model."""
    s = striping
    t = np.arange(s.L)[None, :, None, None]
    w = np.arange(s.W)[None, None, None, :]
    return np.concatenate([((w * s.L + t) * s.H + h).reshape(-1) for h in table_words(s)])


def cost_rows(model, arithmetic):
    """The per-residue cell increments a kernel adds, as values (TABLE_ROWS, M), and the fill
    for the PAD/END rows and for nodes past M.

    16-bit lanes add int16 `bias − cost`; 8-bit lanes take HMMER's biased byte costs as they are.
    """
    if arithmetic == "simd8":
        table = np.full((TABLE_ROWS, model.M), 255, dtype=np.uint8)
        table[: model.costs.shape[0]] = model.costs
        return table, np.uint8(255)
    table = np.full((TABLE_ROWS, model.M), -255, dtype=np.int16)
    table[: model.costs.shape[0]] = model.bias - model.costs.astype(np.int16)
    return table, np.int16(-255)


def _striped(model, striping, arithmetic):
    values, fill = cost_rows(model, arithmetic)
    return stripe_table(values, striping, fill)


def model_tables(models, striping, arithmetic):
    """All models' striped tables end to end, each model's byte offset, and its scalars as
    msv.cu reads them (bias, base, tbm, tec)."""
    parts, offsets, position = [], [], 0
    for model in models:
        table = memoized(
            model, ("striped", striping, arithmetic), lambda model=model: _striped(model, striping, arithmetic)
        )
        offsets.append(position)
        parts.append(table.reshape(-1))
        position += table.size
    tables = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
    scalars = np.array([[m.bias, m.base, m.tbm, m.tec] for m in models], dtype=np.int32)
    return tables, np.array(offsets, dtype=np.int64), scalars
