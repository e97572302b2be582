"""A sequence file read as hmmsearch reads its targets: by Easel (pyhmmer's `SequenceFile`), in
blocks of a few million residues, one after another, so that a search holds a few blocks of
the database rather than all of it.
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

#: Residues a block holds at most (one sequence more where it is longer).
BLOCK_RESIDUES = 1 << 22
#: A local CPU search streams a sequence file at least this large (or larger than the shard
#: memory asked for); a smaller one is held as a database, whose reading costs it little.
STREAM_MIN_BYTES = 64 << 20


def streams(path, shard_memory):
    """Whether a local CPU search streams the sequence file `path` (`shard_memory`: bytes the
    user allows for resident shards, or None)."""
    size = Path(path).stat().st_size
    return size >= STREAM_MIN_BYTES or (shard_memory is not None and size > shard_memory)


def chosen(program, backend, executor, shuffle_out, sequences, shard_memory):
    """Whether a search streams its sequence file: hmmsearch, phmmer or jackhmmer (each round
    reads the file again, as the binary does) on this process's CPU threads, of a file
    `streams` picks, with no shuffle to run on it."""
    path = Path(sequences)
    return (
        program in ("hmmsearch", "phmmer", "jackhmmer")
        and backend == "cpu"
        and executor.in_process
        and not shuffle_out
        and path.is_file()
        and path.name != MANIFEST
        and streams(path, shard_memory)
    )


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
