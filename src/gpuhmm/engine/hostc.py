"""C built for the host with the system compiler (`$CC`, else `cc`) at first use, as a shared
library kept on disk beside the GPU kernels (`kernelcache`), so each machine builds it
once. Without a compiler there is no library, and the caller falls back to numpy."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
import shlex
import subprocess
import tempfile
from pathlib import Path

from . import kernelcache

log = logging.getLogger("gpuhmm")

OPTIONS = ("-O3", "-std=c99", "-shared", "-fPIC")


def function(source: Path, name: str, what: str, instead: str):
    """The ctypes function `name` of the C file `source`, or None, logged once a call, where it
    cannot be built: "no C compiler for `what` (...); `instead`"."""
    code = source.read_text()
    try:
        identity = _identity(tuple(_compiler()))
        try:
            return kernelcache.cached_kernel(
                kernelcache.cache_directory(), code, name, OPTIONS, identity, _compile, _load
            )
        except OSError:  # an unwritable cache: this process builds its own copy
            with tempfile.TemporaryDirectory(prefix="gpuhmm-cc-") as directory:
                return kernelcache.cached_kernel(directory, code, name, OPTIONS, identity, _compile, _load)
    except (OSError, subprocess.CalledProcessError) as error:
        detail = error.stderr.strip().splitlines()[-1:] if isinstance(error, subprocess.CalledProcessError) else ""
        log.warning(
            "no C compiler for %s (%s: %s%s); %s",
            what,
            " ".join(_compiler()),
            error,
            f": {detail[0]}" if detail else "",
            instead,
        )
        return None


@functools.cache
def _identity(compiler):
    """What the cache key holds of `compiler`: its words, its --version text and the machine
    (asked once a process, whichever C files it builds)."""
    version = subprocess.run([*compiler, "--version"], check=True, capture_output=True, text=True).stdout
    return (list(compiler), version, platform.machine())


def _compiler():
    return shlex.split(os.environ.get("CC") or "cc")


def _compile(code, expression, options):
    with tempfile.TemporaryDirectory(prefix="gpuhmm-cc-") as directory:
        source, library = Path(directory) / "source.c", Path(directory) / "library.so"
        source.write_text(code)
        command = [*_compiler(), *options, "-o", str(library), str(source)]
        subprocess.run(command, check=True, capture_output=True, text=True)
        return library.read_bytes(), expression


def _load(path, expression):
    return getattr(ctypes.CDLL(str(path)), expression)
