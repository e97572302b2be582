"""FChoose's comparison of the draw with each cumulative quotient (kernels/tail/stotrace.cuh,
built for the host) against Python's double division, exactly, where a few ulps decide."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gpuhmm.stages.tail.profile import F32

from helpers import tail_build

SHIM = r"""
#include "stotrace.cuh"
using namespace gpuhmm::tail;

extern "C" {
int below_quotient_of(double roll, double c, double norm) { return below_quotient(roll, c, norm, 1.0 / norm); }
}
"""


@pytest.fixture(scope="module")
def lib():
    library = tail_build.build(SHIM)
    library.below_quotient_of.argtypes = [ctypes.c_double] * 3
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
