"""The files a user points outputs at: checked before the search, written without clobbering.

A regular file (or a path that will become one) is written atomically: to a temporary file
beside it, renamed over it once every output is whole, so a failed run leaves no half table.
Symbolic links are followed first, so the link stays and its target gets the new contents.
Anything else (a FIFO, a device, `/dev/stdout`, `/dev/fd/N`, a process substitution) is opened
and written directly, and `-` is standard output: renaming a file over them would replace the
device or pipe with a regular file.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
import tempfile
from pathlib import Path

from ..errors import GpuhmmError

STDOUT = "-"


def _is_direct(path: Path) -> bool:
    """Whether `path` is written in place: it exists and is not a regular file, or it names a
    process's descriptors (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`)."""
    if str(path).startswith(("/dev/", "/proc/")):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:  # missing, or under a path that is not a directory: refused by the checks
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _is_device(path: Path) -> bool:
    """Whether `path` is a character device (`/dev/null`): several outputs may share it, as in
    hmmsearch."""
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False


def _final(path: Path) -> Path:
    """Where a regular-file output lands: symbolic links followed, relative to no directory."""
    return Path(os.path.realpath(path))


def check_outputs(paths, inputs=()) -> None:
    """Refuse, before any work, an output that cannot be written: one line naming the path.

    `paths` maps each option (e.g. "--tblout") to its path, or to None where it is not given.
    Catches a path given twice (a character device such as /dev/null excepted), a path that is
    a directory or one of the `inputs` (which it would replace), a missing or unwritable
    directory (a read-only file system included: a file is created and removed there to find
    out) and an existing device or pipe that is not writable.
    """
    seen = {}
    for option, path in paths.items():
        if path is None:
            continue
        if path == STDOUT:
            key = STDOUT
        else:
            path = Path(path)
            key = str(path) if _is_direct(path) else str(_final(path))
        if key in seen and not _is_device(path):
            raise GpuhmmError(path, f"given to both {seen[key]} and {option}; each output needs its own file")
        seen[key] = option
        if path != STDOUT:
            _check_writable(path, option)
            _check_not_input(path, option, inputs)


def _check_writable(path: Path, option: str) -> None:
    if _is_direct(path):
        if not os.access(path, os.W_OK):
            raise GpuhmmError(path, f"{option}: not writable")
        return
    final = _final(path)
    if final.is_dir():
        raise GpuhmmError(path, f"{option}: is a directory")
    if final.parent.exists() and not final.parent.is_dir():
        raise GpuhmmError(path, f"{option}: {final.parent} is not a directory")
    if not final.parent.is_dir():
        raise GpuhmmError(path, f"{option}: directory {final.parent} does not exist")
    if final.exists() and not os.access(final, os.W_OK):
        raise GpuhmmError(path, f"{option}: not writable")
    try:
        probe, probe_path = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
    except OSError as error:
        raise GpuhmmError(path, f"{option}: cannot write in {final.parent} ({error.strerror})") from None
    os.close(probe)
    os.unlink(probe_path)


class _Guarded(io.RawIOBase):
    """A binary handle whose writes never raise: the first error (a full disk, a closed pipe) is
    kept and raised when it closes. pyhmmer's writers write through C, where an exception
    raised by a Python handle comes back as a SystemError or an EaselError instead."""

    def __init__(self, handle):
        super().__init__()
        self._handle, self._error = handle, None

    def writable(self):
        return True

    def write(self, data):
        if self._error is None:
            try:
                self._handle.write(data)
            except OSError as error:
                self._error = error
        with memoryview(data) as view:  # pickle writes buffers too
            return view.nbytes

    def close(self):
        if self.closed:
            return
        try:
            self._handle.close()
        except OSError as error:
            self._error = self._error or error
        super().close()
        if self._error is not None:
            raise self._error


def _check_not_input(path: Path, option: str, inputs) -> None:
    """Refuse an output that is one of the input files (the same file, by any path)."""
    if _is_direct(path):
        return
    for source in inputs:
        if source is None or str(source) == "-" or not os.path.isfile(source):  # "-": standard input
            continue
        if os.path.exists(path) and os.path.samefile(path, source):
            raise GpuhmmError(path, f"{option}: is also an input of this command; refusing to overwrite it")


@contextlib.contextmanager
def written_together(paths):
    """Yield a binary handle per path (in order); regular files appear under their final names
    only once the block succeeds, all together. Direct outputs are written as the block runs.
    A failure to write names the output it happened to, once the block ends."""
    opened, renames = [], []  # (path, handle); (temporary, final)
    try:
        for path in paths:
            if path == STDOUT:
                sys.stdout.flush()
                opened.append((path, _Guarded(open(sys.stdout.fileno(), "wb", closefd=False))))
            elif _is_direct(Path(path)):
                opened.append((path, _Guarded(_opened(path, lambda path=path: open(path, "wb")))))
            else:
                final = _final(Path(path))
                descriptor, temporary = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
                renames.append((temporary, final))
                opened.append((path, _Guarded(open(descriptor, "wb"))))
        yield [handle for _, handle in opened]
        while opened:
            path, handle = opened.pop(0)
            _opened(path, handle.close)
        for temporary, final in renames:
            os.chmod(temporary, _mode_for(final))
            os.replace(temporary, final)
    finally:
        for _, handle in opened:
            with contextlib.suppress(OSError):
                handle.close()
        for temporary, _ in renames:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def _opened(path, call):
    """call(), with an OSError as the one-line error of output `path`."""
    try:
        return call()
    except OSError as error:
        raise _write_error(path, error) from None


def _write_error(path, error):
    """The one-line error of a failed write to output `path`."""
    return GpuhmmError("standard output" if path == STDOUT else path, f"cannot write ({error.strerror or error})")


def _mode_for(final: Path) -> int:
    """The mode an output gets: the existing file's, else what the umask leaves of 0o666."""
    try:
        return stat.S_IMODE(os.stat(final).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
