"""A sequence file read as hmmsearch reads its targets, one part after another, so that a
search holds a few parts of the database rather than all of it: on the CPU threads in Easel's
blocks (pyhmmer's `SequenceFile`) of a few million residues; on the GPU in pieces of plain
FASTA (`database.held_pieces`), each searched as a database. `chosen` says which.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import numpy as np

from ..errors import GpuhmmError
from ..hits.text import sequence_text
from .fasta import check_lengths, easel_errors, easel_format, open_easel
from .format import MANIFEST
from .readahead import READ_AHEAD_MAX_BYTES

#: Residues a block holds at most (one sequence more where it is longer).
BLOCK_RESIDUES = 1 << 22
#: A local CPU search streams a sequence file at least this large (or larger than the shard
#: memory asked for); a smaller one is held as a database, whose reading costs it little.
STREAM_MIN_BYTES = 64 << 20
#: The most text of a sequence file read in pieces (`chosen`) that a piece takes.
PIECE_BYTES = 1 << 30


def streams(path, shard_memory):
    """Whether a local CPU search streams the sequence file `path` (`shard_memory`: bytes the
    user allows for resident shards, or None)."""
    size = Path(path).stat().st_size
    return size >= STREAM_MIN_BYTES or (shard_memory is not None and size > shard_memory)


def chosen(program, backend, executor, shuffle_out, sequences, shard_memory, format):
    """How a search in this process with no shuffle to run streams its sequence file (in
    `format`, None: detected), or None where it holds it as a database:
    - "blocks": hmmsearch, phmmer or jackhmmer (each round reads the file again, as the binary
      does) on the CPU threads, of a file `streams` picks;
    - "pieces": hmmsearch, phmmer or jackhmmer (each round reads the file again) on the GPU, of
      a FASTA file larger than `readahead` reads ahead or than `shard_memory`, held a piece at a
      time (`piece_bytes`)."""
    path = Path(sequences)
    searches = program in ("hmmsearch", "phmmer", "jackhmmer")
    if not (searches and executor.in_process and not shuffle_out and path.is_file() and path.name != MANIFEST):
        return None
    if backend == "cpu":
        return "blocks" if streams(path, shard_memory) else None
    size = path.stat().st_size
    large = size > READ_AHEAD_MAX_BYTES or (shard_memory is not None and size > shard_memory)
    return "pieces" if format in (None, "fasta") and large else None


def piece_bytes(shard_memory):
    """The text a search reads in pieces takes a piece at a time: PIECE_BYTES, or an eighth of
    the shard memory asked for: a piece searched and the next read, each held about four times
    over (its codes, names and shards, and the filters' layout)."""
    return PIECE_BYTES if shard_memory is None else max(1, min(PIECE_BYTES, int(shard_memory) // 8))


@dataclasses.dataclass
class StreamedFile:
    """What a search read of a streamed sequence file, as a database tells it: its sequences,
    residues, and the blocks it came in (`shards`: (sequences, residues) of each)."""

    sequences: int = 0
    residues: int = 0
    shards: list = dataclasses.field(default_factory=list)


def blocks(path, alphabet, format, read):
    """(file position of the first sequence, 0-based; DigitalSequenceBlock; its residues) of
    `path` in `format` (None: detected), digitized in `alphabet`, in file order; `read` (a
    StreamedFile) counts them.
    Reading errors are one line naming the file, as a held database's are."""
    with contextlib.ExitStack() as stack:
        format = easel_format(path, format)
        handle, source = open_easel(path, alphabet, format, stack)
        with easel_errors(path, source, format or handle.format):
            while block := handle.read_block(residues=BLOCK_RESIDUES):
                longest = block.largest()
                check_lengths(path, np.array([len(longest)]), lambda _, name=sequence_text(longest)[0]: name)
                position, residues = read.sequences, block.total_length()
                read.sequences += len(block)
                read.residues += residues
                read.shards.append((len(block), residues))
                yield position, block, residues
    if not read.sequences:
        raise GpuhmmError(path, "sequence file holds no sequences")
