"""Input files as pyhmmer should read them: gzip recognised by content, stream errors kept."""

from __future__ import annotations

import gzip
import io
import shutil
import sys
import zlib
from pathlib import Path

from ..errors import GpuhmmError

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

    @property
    def compressed(self):
        """Whether the file is gzip, which `source` decompresses."""
        return self._stream is not None

    def check_stream(self, path):
        """Raise the one-line error for a truncated or damaged gzip stream, if one was met."""
        if self._stream is not None and self._stream.error is not None:
            raise GpuhmmError(path, f"truncated or damaged gzip file ({self._stream.error})")


#: How a user names standard input.
STDIN = "-"


def is_stream(path) -> bool:
    """Whether `path` is standard input (`-`) or a stream (a pipe, `/dev/stdin`, a process
    substitution), which can be read only once, and only by this process: such input is
    spooled to a file first. `/dev/stdin` redirected from a file is a process's own view of it."""
    if str(path) == STDIN or str(path).startswith(("/dev/", "/proc/")):
        return True
    try:
        return not Path(path).is_dir() and not Path(path).is_file() and Path(path).exists()
    except OSError:
        return False


def spool(path, directory) -> Path:
    """Copy the stream `path` (or standard input, for `-`) into a file in `directory`."""
    target = Path(directory) / ("stdin" if str(path) == STDIN else Path(path).name)
    try:
        with open(sys.stdin.fileno() if str(path) == STDIN else path, "rb", closefd=str(path) != STDIN) as source:
            with open(target, "wb") as copy:
                shutil.copyfileobj(source, copy, 1 << 20)
    except OSError as error:
        raise GpuhmmError(path, f"cannot read ({error.strerror or error})") from None
    return target
