"""The GPU SSV/MSV kernels against pyhmmer's msv_filter (HMMER 3.4), on both lane arithmetics."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import filter_shard, msv_filter_scores

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("table_capability", [None, 80], ids=["native", "simd8"])
def test_gpu_scores_equal_msv_filter(pfam_test_data, table_capability):
    from gpuhmm import msv, prefilter
    from gpuhmm.gpu import GpuEngine

    hmms, sequences = pfam_test_data
    engine = GpuEngine(table_capability)
    shard = filter_shard(sequences)
    results = prefilter.f1_filter(engine, msv.msv_models(hmms), shard, 0.02)
    nonempty = shard.lengths > 0
    for hmm, result in zip(hmms, results):
        expected, undecided = msv_filter_scores(hmm, sequences)
        assert np.array_equal(result.scores[nonempty], expected[nonempty]), hmm.name
        assert np.array_equal(result.ssv_undecided[nonempty], undecided[nonempty]), hmm.name


def test_gpu_equals_reference_raw_outputs(pfam_test_data):
    """Raw kernel outputs (SSV bests, MSV xJ) equal the numpy model of the same lanes."""
    from gpuhmm import msv, prefilter, tuning
    from gpuhmm.gpu import GpuEngine

    hmms, sequences = pfam_test_data
    engine = GpuEngine()
    reference = prefilter.ReferenceEngine(engine.compute_capability, warps=engine.warps(1))
    shard = filter_shard([s for s in sequences if len(s) < 3000][:120])
    for model in msv.msv_models(hmms[:6]):
        for stage in ("ssv", "msv"):
            choice = tuning.choose(model.M, stage, engine.compute_capability)
            blocks = shard.warp_blocks(choice.striping.S, engine.warps(1))
            if stage == "ssv":
                assert np.array_equal(engine.ssv(choice, blocks, [model], shard.sequences),
                                      reference.ssv(choice, blocks, [model], shard.sequences))
            else:
                assert np.array_equal(engine.msv(choice, blocks, [model], shard.tjb, shard.sequences),
                                      reference.msv(choice, blocks, [model], shard.tjb, shard.sequences))
