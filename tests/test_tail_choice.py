"""FChoose's comparison of the draw with each cumulative quotient, and the choice from raw weights
that stands in for FNorm and FChoose (kernels/tail/stotrace.cuh, built for the host), against
Python's double division and the numpy reference (tests/oracle/stotrace.py), exactly, where a
few ulps decide."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gpuhmm.stages.tail.profile import F32

from helpers import tail_build
from oracle.stotrace import FastRandomness, choose, normalized

SHIM = r"""
#include "stotrace.cuh"
using namespace gpuhmm::tail;

extern "C" {
int below_quotient_of(double roll, double c, double norm) { return below_quotient(roll, c, norm, 1.0 / norm); }

// fchoose_raw's choice among n (2 to 4) weights for `roll`, or −2 where it leaves it to FNorm and FChoose.
int fchoose_raw_of(const float *path, int n, double roll) {
    return n == 2 ? fchoose_raw<2>(roll, path) : n == 3 ? fchoose_raw<3>(roll, path) : fchoose_raw<4>(roll, path);
}
}
"""


@pytest.fixture(scope="module")
def lib():
    library = tail_build.build(SHIM)
    library.below_quotient_of.argtypes = [ctypes.c_double] * 3
    library.fchoose_raw_of.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_double]
    return library


def test_fchoose_compares_the_rounded_quotient(lib):
    """FChoose's test, draw < cumulative / total, on sums of float32 weights whose quotient lies
    within a few ulps of the draw, where only the correctly rounded division decides, and far
    from it, where the product with the total's reciprocal does."""
    generator = np.random.default_rng(17)
    ulps = 0
    for _ in range(4000):
        roll = int(generator.integers(0, 2**32)) / 4294967296.0
        weights = (generator.random(4) * 10.0 ** generator.integers(-30, 3)).astype(F32)
        norm = 0.0
        for w in weights:
            norm += float(w)
        near = roll * norm  # a cumulative sum whose quotient is about the draw
        steps = int(generator.integers(-6, 7))
        c = float(np.nextafter(near, np.inf if steps > 0 else -np.inf)) if steps else near
        for _ in range(abs(steps) - 1):
            c = float(np.nextafter(c, np.inf if steps > 0 else -np.inf))
        for cumulative in (c, float(weights[0]), near * (1 + 1e-9), 0.0):
            expected = roll < cumulative / norm
            assert lib.below_quotient_of(roll, cumulative, norm) == expected, (roll, cumulative, norm)
            ulps += (roll < cumulative * (1.0 / norm)) != expected
    assert ulps > 0  # the cases reach where the reciprocal's product would choose otherwise


def test_raw_weights_choose_as_fnorm_and_fchoose(lib):
    """FNorm then FChoose against the choice from the raw weights' sums: equal wherever the raw
    choice decides, on weights from subnormal to large and draws at the reference's quotients,
    a few ulps either side, where only the normalized weights decide."""
    generator = np.random.default_rng(23)
    decided = deferred = 0
    for _ in range(3000):
        n = int(generator.integers(2, 5))
        path = (generator.random(n) * 10.0 ** generator.integers(-44, 30, size=n)).astype(F32)
        path[generator.random(n) < 0.2] = 0.0
        if not path.any():
            continue
        weights = normalized(list(path))
        cumulative = np.cumsum([float(w) for w in weights])
        quotient = float(cumulative[int(generator.integers(0, n))] / cumulative[-1])
        rolls = [float(np.nextafter(quotient, np.inf * side)) for side in (-1, 1)]
        rolls += [quotient, quotient * (1 + 3e-7), int(generator.integers(0, 2**32)) / 2**32, 0.0]
        for roll in rolls:
            if not 0.0 <= roll < 1.0:
                continue
            rng = FastRandomness(1)
            rng.random = lambda roll=roll: roll
            expected = choose(rng, weights)
            ours = lib.fchoose_raw_of(np.ascontiguousarray(path).ctypes.data, n, roll)
            if ours == -2:
                deferred += 1
            else:
                decided += 1
                assert ours == expected, (path, roll)
    assert decided > 4000 and deferred > 4000
