"""The queries and sequences a job is given, as files its stages read: a stream's copy,
pyhmmer's objects written out or read as they are, and errors naming each input as the user
gave it."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from ..errors import GpuhmmError
from . import fasta, inputs, memory, models


def readable(name, cleanup):
    """A path that can be read as often as needed: `name` itself, or a stream's copy in a
    temporary directory, with errors about the copy naming `name` while `cleanup` lasts.
    pyhmmer objects are returned as they are."""
    if not memory.is_file(name) or not inputs.is_stream(name):
        return name
    copy = inputs.spool(name, cleanup.enter_context(tempfile.TemporaryDirectory(prefix="gpuhmm-in-")))
    cleanup.enter_context(named_as(str(copy), name))
    return copy


def written(sequences, name, hmms, cleanup):
    """pyhmmer's target sequences written to a FASTA file in a temporary directory, to be read
    as a named file is; errors about the file name them `name` while `cleanup` lasts."""
    path = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="gpuhmm-in-"))) / "sequences.fa"
    memory.write_fasta(sequences, path, name, hmms[0].alphabet if hmms else None)
    cleanup.enter_context(named_as(str(path), name))
    return path


def query_models(source, name, allow_empty=False):
    """The models of a file (`source`, a path), or pyhmmer's HMMs; errors about them name `name`."""
    return models.read_models(source, allow_empty) if memory.is_file(source) else memory.models(source, name)


def query_sequences(path, name, format):
    """The query sequences of a file (read as protein, in `format`, None: detected) or of
    pyhmmer's objects."""
    if memory.is_file(path):
        return fasta.read_sequences(path, "amino", format)
    found = list(memory.sequences(path, name, fasta.ALPHABETS["amino"]()))
    if not found:
        raise GpuhmmError(name, "holds no sequences")
    return found


@contextlib.contextmanager
def named_as(path, name):
    """Errors about `path` raised in the block name `name` instead."""
    try:
        yield
    except GpuhmmError as error:
        if error.source == path:
            raise GpuhmmError(name, error.problem) from None
        raise
