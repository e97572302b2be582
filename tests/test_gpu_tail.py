"""The tail's kernels on the GPU (kernels/tail/tail.cu): the domain-definition cases' hits equal
pyhmmer's, record for record and table for table, and the kernel is built as HMMER's arithmetic
needs: no fused float32 multiply-adds and no flushing of float32 subnormals."""

from __future__ import annotations

import pyhmmer
import pytest

from gpuhmm.engine import gpu_problem
from gpuhmm.hits import records
from gpuhmm.stages.tail import launch, readback, scores, serialized

from helpers.tail import CASES, SETTINGS, records_of, tables_of

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(gpu_problem() is not None, reason="no usable GPU")]


@pytest.fixture(scope="module")
def engine():
    from gpuhmm.engine.gpu import GpuEngine

    return GpuEngine()


@pytest.mark.parametrize("setting", SETTINGS)
def test_hits_and_tables_equal_pyhmmer(engine, tail_cases, setting):
    _hits_and_tables_equal_pyhmmer(engine, tail_cases, setting)


@pytest.mark.parametrize("threshold", ["WIDE_PAIR_CELLS", "WIDE_ENVELOPE_CELLS"])
def test_items_on_a_warp_equal_pyhmmer(engine, tail_cases, monkeypatch, threshold):
    """Every pair's parsers (tail_parse_wide), or every envelope (tail_envelopes_wide), on a warp."""
    monkeypatch.setattr(launch, threshold, 0)
    _hits_and_tables_equal_pyhmmer(engine, tail_cases, next(iter(SETTINGS)))


def _hits_and_tables_equal_pyhmmer(engine, tail_cases, setting):
    models, profiles, residues, offsets, targets, pairs, sequences, chosen = tail_cases
    alphabet = sequences[0].alphabet
    options = dict(Z=len(sequences), bias_filter=False, **SETTINGS[setting])
    pipelines = [records.pipeline_settings(pyhmmer.plan7.Pipeline(alphabet, **options), m) for m in models]
    pair_model, pair_sequence = zip(*pairs)
    null1 = [scores.null_one(len(targets[s].residues)) for s in pair_sequence]
    chosen_targets = (residues, offsets, serialized.NameTable.of(targets))
    batch = launch.TailBatch.build(
        launch.ModelPack(profiles), chosen_targets, pair_model, pair_sequence, null1, pipelines, 42
    )
    results = readback.read_back(batch, engine.tail(batch))
    assert [status for status, _, _ in results] == [launch.OK] * len(CASES)
    found = {(int(p["model"]), int(p["sequence"])): record for p, (_, _, record) in zip(batch.pairs, results)}
    for m, hmm in enumerate(models):
        mine = [found[m, s] for model, s in pairs if model == m and found[m, s] is not None]
        block = pyhmmer.easel.DigitalSequenceBlock(alphabet, [sequences[chosen[s]] for model, s in pairs if model == m])
        expected = pyhmmer.plan7.Pipeline(alphabet, **options).search_hmm(hmm, block)
        rebuilt = records.tophits_of_buffers(hmm, mine, pipelines[m])
        assert records_of(rebuilt) == records_of(expected), (setting, hmm.name)
        assert tables_of(rebuilt) == tables_of(expected), (setting, hmm.name)


def test_kernel_has_no_float_contraction_or_flushing(engine):
    from cupy.cuda import nvrtc

    from gpuhmm.engine import gpu, kernelcache

    options = ["-std=c++17", f"--gpu-architecture=compute_{engine.architecture}", *gpu._EXACT_OPTIONS]
    program = nvrtc.createProgram(kernelcache.kernel_source("tail/tail.cu"), "tail.cu", [], [])
    nvrtc.compileProgram(program, options)
    ptx = nvrtc.getPTX(program)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    assert "fma.rn.f32" not in ptx and ".ftz.f32" not in ptx
    assert "div.rn.f32" in ptx  # float division stays IEEE (HMMER's rescaling divides)
