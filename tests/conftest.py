"""Fixtures and hooks the tests share; the helpers themselves live in `helpers/`."""

from __future__ import annotations

import functools

import pytest

from helpers import data
from helpers.tail import batch_cases


def _gpu_present():
    try:
        from gpuhmm.engine import gpu
    except Exception:  # no CuPy, or CuPy without a CUDA driver
        return False
    return gpu.device_count() > 0


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if "gpu" in item.keywords]
    if marked and not _gpu_present():
        skip = pytest.mark.skip(reason="needs a CUDA GPU and CuPy")
        for item in marked:
            item.add_marker(skip)


@pytest.fixture
def two_gpus():
    """Skips a `gpu` test where fewer than two GPUs are visible: a dask-cuda worker per GPU."""
    from gpuhmm.engine import gpu

    if gpu.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")


@pytest.fixture(scope="module")
def pfam_test_data():
    """The test Pfam models and the test proteins (`helpers.data.pfam_test_data`, read once)."""
    return data.pfam_test_data()


@pytest.fixture(scope="module")
def tail_cases():
    """The tail's cases as one batch (`helpers.tail.batch_cases`, built once)."""
    return _tail_cases()


@functools.cache
def _tail_cases():
    return batch_cases(data.pfam_test_data())
