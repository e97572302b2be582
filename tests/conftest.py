"""Fixtures and hooks the tests share; the helpers themselves live in `helpers/`."""

from __future__ import annotations

import pytest

from helpers.data import DATA
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


@pytest.fixture(scope="session")
def pfam_test_data():
    """The test Pfam models and the test proteins (pyhmmer digital sequences)."""
    import pyhmmer

    alphabet = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        hmms = list(handle)
    with pyhmmer.easel.SequenceFile(str(DATA / "proteins.faa"), digital=True, alphabet=alphabet) as handle:
        sequences = list(handle.read_block())
    return hmms, sequences


@pytest.fixture(scope="session")
def tail_cases(pfam_test_data):
    """The tail's cases as one batch (`helpers.tail.batch_cases`)."""
    return batch_cases(pfam_test_data)
