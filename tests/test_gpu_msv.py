"""The GPU SSV/MSV kernels against pyhmmer's msv_filter (HMMER 3.4), on both lane arithmetics."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.filters import filter_shard, msv_filter_scores, per_model

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("table_capability", [None, 80], ids=["native", "simd8"])
def test_gpu_scores_equal_msv_filter(pfam_test_data, table_capability):
    from gpuhmm.engine import filters
    from gpuhmm.engine.gpu import GpuEngine
    from gpuhmm.stages import msvfilter

    hmms, sequences = pfam_test_data
    engine = GpuEngine(table_capability)
    shard = filter_shard(sequences)
    models = msvfilter.msv_models(hmms)
    scores, undecided = per_model(filters.f1_filter(engine, models, shard, 1.0), len(models), shard.sequences)
    nonempty = shard.lengths > 0
    for m, hmm in enumerate(hmms):
        expected, expected_undecided = msv_filter_scores(hmm, sequences)
        assert np.array_equal(scores[m][nonempty], expected[nonempty]), hmm.name
        assert np.array_equal(undecided[m][nonempty], expected_undecided[nonempty]), hmm.name


@pytest.mark.parametrize("F1", [0.02, 1e-4])
def test_gpu_f1_pairs_equal_reference(pfam_test_data, F1):
    """The F1 decision on the GPU (f1.cu) and the pair-list MSV (msvpairs.cu) give the same
    pairs and scores as the numpy reference of both."""
    from gpuhmm.engine import filters
    from gpuhmm.engine.gpu import GpuEngine
    from gpuhmm.engine.reference import ReferenceEngine
    from gpuhmm.stages import msvfilter

    hmms, sequences = pfam_test_data
    engine = GpuEngine()
    shard = filter_shard([s for s in sequences if len(s) < 3000][:300])
    models = msvfilter.msv_models(hmms[::3])
    got = filters.f1_filter(engine, models, shard, F1)
    expected = filters.f1_filter(ReferenceEngine(engine.compute_capability, warps=engine.warps(1)), models, shard, F1)
    for field in ("pair_model", "pair_sequence", "scores"):
        assert np.array_equal(getattr(got, field), getattr(expected, field)), field
    assert len(got.undecided_model) > 0


def test_gpu_equals_reference_raw_outputs(pfam_test_data):
    """Raw kernel outputs (SSV bests, MSV xJ) equal the numpy model of the same lanes."""
    from gpuhmm.engine import tuning
    from gpuhmm.engine.gpu import GpuEngine
    from gpuhmm.engine.reference import ReferenceEngine
    from gpuhmm.stages import msvfilter

    hmms, sequences = pfam_test_data
    engine = GpuEngine()
    reference = ReferenceEngine(engine.compute_capability, warps=engine.warps(1))
    shard = filter_shard([s for s in sequences if len(s) < 3000][:120])
    for model in msvfilter.msv_models(hmms[:6]):
        for stage in ("ssv", "msv"):
            choice = tuning.choose(model.M, stage, engine.compute_capability)
            blocks = shard.warp_blocks(choice.striping.S, engine.warps(1))
            if stage == "ssv":
                assert np.array_equal(
                    engine.ssv(choice, blocks, [model], shard.sequences),
                    reference.ssv(choice, blocks, [model], shard.sequences),
                )
            else:
                assert np.array_equal(
                    engine.msv(choice, blocks, [model], shard.tjb, shard.sequences),
                    reference.msv(choice, blocks, [model], shard.tjb, shard.sequences),
                )


def test_kernels_load_from_the_disk_cache(pfam_test_data, tmp_path, monkeypatch):
    """A second engine (as a second process would) loads each specialization from gpuhmm's disk
    cache, and gives the same scores as the engine that compiled it."""
    from gpuhmm.engine import filters, gpu
    from gpuhmm.stages import msvfilter

    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path))
    hmms, sequences = pfam_test_data
    shard = filter_shard(sequences[:200])
    models = msvfilter.msv_models(hmms[:4])
    outcomes = []
    for round in range(2):
        if round:

            def no_compiling(*arguments):
                raise AssertionError("compiled again")

            monkeypatch.setattr(gpu, "_nvrtc", no_compiling)
        engine = gpu.GpuEngine()
        outcomes.append(per_model(filters.f1_filter(engine, models, shard, 1.0), len(models), shard.sequences))
        assert engine._cache_failures == 0
    stored = sorted(tmp_path.glob("gpuhmm-*.bin"))
    assert stored and len(stored) == len(list(tmp_path.glob("gpuhmm-*.name")))
    for first, second in zip(*outcomes):
        for a, b in zip(first, second):
            np.testing.assert_array_equal(a, b)  # scores are NaN where a pair did not pass
