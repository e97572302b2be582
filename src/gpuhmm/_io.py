"""All-or-nothing file outputs: nothing appears under its final name unless every file is whole."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import zlib
from pathlib import Path

from .errors import GpuhmmError


@contextlib.contextmanager
def atomic_outputs(*paths):
    """Yield temporary sibling paths; rename them all onto `paths` only if the block succeeds.

    A failure (bad input found late, an interrupt) removes the temporaries and leaves any
    earlier outputs as they were, so a half-written table never carries a final name.
    """
    finals = [Path(path) for path in paths]
    temporaries = [path.with_name(f".{path.name}.tmp{os.getpid()}") for path in finals]
    try:
        for final in finals:
            final.parent.mkdir(parents=True, exist_ok=True)
        yield temporaries
        for temporary, final in zip(temporaries, finals):
            os.replace(temporary, final)
    finally:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)


GZIP_MAGIC = b"\x1f\x8b"


class _GzipStream(io.RawIOBase):
    """Decompresses for pyhmmer; a stream error ends the stream and is kept for the caller.

    Raising through pyhmmer's C reader is unsafe: it can leave the exception pending behind
    a sequence it returns, which then fails on its next attribute access.
    """

    def __init__(self, path):
        super().__init__()
        self._file = gzip.open(path, "rb")
        self.error = None

    def readable(self):
        return True

    def readinto(self, buffer):
        try:
            data = self._file.read(len(buffer))
        except (EOFError, OSError, zlib.error) as error:
            self.error = error
            return 0
        buffer[: len(data)] = data
        return len(data)

    def close(self):
        self._file.close()
        super().close()


class InputFile:
    """What pyhmmer should read a path through, and the stream error it met, if any.

    Easel decides gzip by the `.gz` suffix and pipes through an external `gzip`; gpuhmm
    decides by content, so a compressed file needs no suffix and no `gzip` program, and a
    truncated archive is always reported (pyhmmer can end a read early without raising).
    """

    def __init__(self, path, stack):
        path = Path(path)
        self._stream = None
        with open(path, "rb") as handle:
            magic = handle.read(2)
        if magic == GZIP_MAGIC:
            self._stream = stack.enter_context(_GzipStream(path))
            self.source = stack.enter_context(io.BufferedReader(self._stream))
        elif path.suffix == ".gz":  # not compressed after all: keep Easel from piping it to gzip
            self.source = stack.enter_context(open(path, "rb"))
        else:
            self.source = path

    def check_stream(self, path):
        """Raise the one-line error for a truncated or damaged gzip stream, if one was met."""
        if self._stream is not None and self._stream.error is not None:
            raise GpuhmmError(path, f"truncated or damaged gzip file ({self._stream.error})")
