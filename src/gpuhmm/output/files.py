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
    except FileNotFoundError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _final(path: Path) -> Path:
    """Where a regular-file output lands: symbolic links followed, relative to no directory."""
    return Path(os.path.realpath(path))


def check_outputs(paths) -> None:
    """Refuse, before any work, an output that cannot be written: one line naming the path.

    `paths` maps each option (e.g. "--tblout") to its path, or to None where it is not given.
    Catches a path given twice, a path that is a directory, a missing or unwritable directory
    (a read-only file system included: a file is created and removed there to find out) and an
    existing device or pipe that is not writable.
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
        if key in seen:
            raise GpuhmmError(path, f"given to both {seen[key]} and {option}; each output needs its own file")
        seen[key] = option
        if path != STDOUT:
            _check_writable(path, option)


def _check_writable(path: Path, option: str) -> None:
    if _is_direct(path):
        if not os.access(path, os.W_OK):
            raise GpuhmmError(path, f"{option}: not writable")
        return
    final = _final(path)
    if final.is_dir():
        raise GpuhmmError(path, f"{option}: is a directory")
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


@contextlib.contextmanager
def written_together(paths):
    """Yield a binary handle per path (in order); regular files appear under their final names
    only once the block succeeds, all together. Direct outputs are written as the block runs.
    A failure to write names the output it happened to."""
    opened, renames = [], []  # (path, handle); (temporary, final)
    try:
        for path in paths:
            if path == STDOUT:
                sys.stdout.flush()
                opened.append((path, open(sys.stdout.fileno(), "wb", closefd=False)))
            elif _is_direct(Path(path)):
                opened.append((path, _opened(path, lambda path=path: open(path, "wb"))))
            else:
                final = _final(Path(path))
                descriptor, temporary = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
                renames.append((temporary, final))
                opened.append((path, open(descriptor, "wb")))
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
        raise write_error(path, error) from None


def write_error(path, error):
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
