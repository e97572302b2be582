"""Compiled kernel specializations kept on disk, shared by every process on the machine.

CuPy's disk cache skips any module built with `name_expressions`: it recompiles to learn the
lowered (mangled) names. Every search process, and every worker of a multi-GPU cluster, would
then run NVRTC on every specialization it needs, tens of seconds per process. Here each
specialization is compiled once: its binary and lowered name are stored under a key that covers
the full source (headers inlined), the name expression, the compiler options and the compiler's
identity (CuPy and NVRTC versions), so a change to any of them compiles afresh.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path


def cached_kernel(directory, code, expression, options, identity, compile, load):
    """load(binary path, lowered name) of one specialization, compiling it with
    compile(code, expression, options) → (binary bytes, lowered name) only when no process has
    stored it yet."""
    key = hashlib.sha256(json.dumps([code, expression, list(options), list(identity)]).encode()).hexdigest()
    directory = Path(directory)
    binary_path, name_path = directory / f"gpuhmm-{key}.bin", directory / f"gpuhmm-{key}.name"
    try:
        lowered = name_path.read_text()
        if binary_path.exists():
            return load(binary_path, lowered)
    except OSError:
        pass
    binary, lowered = compile(code, expression, options)
    directory.mkdir(parents=True, exist_ok=True)
    # The name goes first: a binary found on disk always has its name beside it. Each file is
    # written whole and renamed into place, so processes racing to store one see no torn file.
    _write_whole(name_path, lowered.encode())
    _write_whole(binary_path, binary)
    return load(binary_path, lowered)


def _write_whole(path, data):
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as handle:
        handle.write(data)
    os.replace(handle.name, path)


KERNELS = Path(__file__).parent / "kernels"


def cache_directory():
    """Where compiled kernels are kept: `$CUPY_CACHE_DIR`, by default ~/.cache/gpuhmm/kernels."""
    return os.environ.get("CUPY_CACHE_DIR", str(Path.home() / ".cache" / "gpuhmm" / "kernels"))


@functools.cache
def kernel_source(name):
    """A kernel file (a path under `kernels/`) with its headers inlined, each once, so the disk
    cache key covers them; a header is found beside the file that includes it."""
    seen = set()

    def inlined(path):
        def inline(match):
            header = path.parent / match.group(1)
            if header in seen:
                return ""
            seen.add(header)
            return inlined(header).replace("#pragma once", "")

        return _INCLUDE.sub(inline, path.read_text())

    return inlined(KERNELS / name)


_INCLUDE = re.compile(r'^#include "([a-z0-9_]+\.cuh)"$', re.MULTILINE)
