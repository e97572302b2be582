"""Builds the tail's CUDA sources (src/gpuhmm/engine/kernels/tail/) with the host C++ compiler,
for tests that call them through ctypes. The flags keep HMMER's float arithmetic: no
contraction of a·b + c, no fast math, subnormals kept (the host's default)."""

from __future__ import annotations

import ctypes
import hashlib
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

KERNELS = pathlib.Path(__file__).resolve().parents[2] / "src" / "gpuhmm" / "engine" / "kernels" / "tail"
FLAGS = ("-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared")
_BUILT = {}


def build(source):
    """The shared library of C++ `source` (which includes the tail headers by name), or a skip
    where no C++ compiler is installed."""
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the tail's sources for the host")
    headers = sorted(KERNELS.glob("*.cuh"))
    digest = hashlib.sha256(source.encode())
    for header in headers:
        digest.update(header.read_bytes())
    key = digest.hexdigest()[:16]
    if key not in _BUILT:
        directory = pathlib.Path(tempfile.mkdtemp(prefix="gpuhmm-tail-"))
        (directory / "shim.cpp").write_text(source)
        library = directory / f"tail-{key}.so"
        subprocess.run(
            [compiler, *FLAGS, f"-I{KERNELS}", str(directory / "shim.cpp"), "-o", str(library)],
            check=True,
            capture_output=True,
            text=True,
        )
        _BUILT[key] = ctypes.CDLL(str(library))
    return _BUILT[key]


class Profile(ctypes.Structure):
    """`gpuhmm::tail::Profile`; `from_striped` keeps the arrays it points into alive."""

    _fields_ = [
        ("M", ctypes.c_int),
        ("Q", ctypes.c_int),
        ("K", ctypes.c_int),
        ("Kp", ctypes.c_int),
        ("rfv", ctypes.c_void_p),
        ("tfv", ctypes.c_void_p),
        ("degenerate", ctypes.c_void_p),
        ("ntv", ctypes.c_void_p),
        ("tau", ctypes.c_float),
        ("lam", ctypes.c_float),
    ]

    @classmethod
    def from_striped(cls, profile):
        """From a `stages.tail.profile.StripedProfile`."""
        abc = profile.alphabet
        degenerate = np.zeros((max(1, len(abc.degenerate)), abc.K + 1), dtype=np.uint8)
        for row, members in enumerate(abc.degenerate):
            degenerate[row, 0] = len(members)
            degenerate[row, 1 : 1 + len(members)] = members
        rfv = np.ascontiguousarray(profile.emissions, dtype=np.float32)
        tfv = np.ascontiguousarray(profile.transitions, dtype=np.float32)
        ntv = np.ascontiguousarray(tfv.reshape(-1, profile.Q, 4).transpose(1, 2, 0))
        pointers = (array.ctypes.data for array in (rfv, tfv, degenerate, ntv))
        made = cls(profile.M, profile.Q, abc.K, abc.Kp, *pointers)
        made.tau, made.lam = profile.tau, profile.lam
        made._keep = (rfv, tfv, degenerate, ntv)
        return made


class SpecialTransitions(ctypes.Structure):
    """`gpuhmm::tail::SpecialTransitions`, from `stages.tail.profile.SpecialTransitions`."""

    _fields_ = [(name, ctypes.c_float) for name in ("e_move", "e_loop", "move", "loop")]

    @classmethod
    def from_reference(cls, xf):
        return cls(float(xf.e_move), float(xf.e_loop), float(xf.move), float(xf.loop))


class Matrix(ctypes.Structure):
    """`gpuhmm::tail::Matrix` over numpy arrays: `empty(L, Q, full)` allocates one, `from_reference`
    points at a `reference.fwdback.DPMatrix`, and `specials`, `rows` read it back."""

    _fields_ = [
        ("L", ctypes.c_int),
        ("Q", ctypes.c_int),
        ("has_own_scales", ctypes.c_int),
        ("xmx", ctypes.c_void_p),
        ("M", ctypes.c_void_p),
        ("D", ctypes.c_void_p),
        ("I", ctypes.c_void_p),
    ]

    @classmethod
    def _over(cls, L, Q, has_own_scales, xmx, rows):
        pointers = (None if r is None else r.ctypes.data for r in rows)
        made = cls(L, Q, int(has_own_scales), xmx.ctypes.data, *pointers)
        made._keep = (xmx, rows)
        return made

    @classmethod
    def empty(cls, L, Q, full):
        rows = [np.zeros((L + 1, Q, 4), dtype=np.float32) for _ in range(3)] if full else [None] * 3
        return cls._over(L, Q, False, np.zeros((L + 1, 6), dtype=np.float32), rows)

    @classmethod
    def from_reference(cls, matrix):
        rows = [None if r is None else np.ascontiguousarray(r, np.float32) for r in (matrix.M, matrix.D, matrix.I)]
        Q = rows[0].shape[1] if rows[0] is not None else 0
        specials = np.ascontiguousarray(matrix.specials, dtype=np.float32)
        return cls._over(matrix.L, Q, matrix.has_own_scales, specials, rows)

    @property
    def specials(self):
        return self._keep[0]

    @property
    def rows(self):
        return self._keep[1]
