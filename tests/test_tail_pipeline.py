"""The whole tail (kernels/tail/, built for the host) against pyhmmer: every (model, target) pair
of the domain-definition cases runs from the Forward parser to the hit in C++, and the hits,
rebuilt into a TopHits (`output.records`), equal pyhmmer's field by field and print the same
tables, under several threshold settings."""

from __future__ import annotations

import ctypes

import numpy as np
import pyhmmer
import pytest
import tail_build
from test_domains import CASES, MULTI_DOMAIN_REGIONS, SETTINGS, _records, _tables

from gpuhmm.hits import records
from gpuhmm.stages import vitfilter
from gpuhmm.stages.tail import launch, readback, scores
from gpuhmm.stages.tail.profile import StripedProfile
from gpuhmm.stages.tail.target import Target

SHIM = """
#include "batch.cuh"
using namespace gpuhmm_tail;
extern "C" void tail_run(const Batch *batch) {
    for (int p = 0; p < batch->npairs; p++) run_pair(batch, p, batch->scratch);
}
"""


def run_batch(batch):
    """Every pair of `batch` (a TailBatch) through the host build: read_back's results."""
    lib = tail_build.build(SHIM)
    lib.tail_run.argtypes = [ctypes.c_void_p]
    scratch, out = batch.bounds()
    arrays = launch.output_arrays(len(batch.pairs), out)
    arrays.update(batch.inputs(), scratch=np.zeros(scratch, np.uint8))
    arrays["models"] = batch.models.table(batch.models.blob.ctypes.data)
    struct = batch.struct(lambda name: arrays[name].ctypes.data, len(batch.pairs), scratch, out)
    lib.tail_run(ctypes.byref(struct))
    return arrays


@pytest.fixture(scope="module")
def cases(pfam_test_data):
    hmms, sequences = pfam_test_data
    names = sorted({name for name, _ in CASES})
    models = [next(h for h in hmms if h.name == name) for name in names]
    written = vitfilter.configured(models, pyhmmer.plan7.Background(models[0].alphabet))
    profiles = [StripedProfile.from_configured(*c) for c in written]
    chosen = sorted({index for _, index in CASES})
    pieces = [np.asarray(sequences[i].sequence, dtype=np.uint8) for i in chosen]
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(np.int64)
    targets = [Target.from_digital(sequences[i]) for i in chosen]
    pairs = [(names.index(name), chosen.index(index)) for name, index in CASES]
    return models, profiles, np.concatenate(pieces), offsets, targets, pairs, sequences, chosen


@pytest.mark.parametrize("setting", SETTINGS)
def test_hits_and_tables_equal_pyhmmer(cases, setting):
    models, profiles, residues, offsets, targets, pairs, sequences, chosen = cases
    alphabet = sequences[0].alphabet
    options = dict(Z=len(sequences), bias_filter=False, **SETTINGS[setting])
    pipelines = [records.pipeline_settings(pyhmmer.plan7.Pipeline(alphabet, **options), m) for m in models]
    pair_model, pair_sequence = (np.array(column) for column in zip(*pairs))
    null1 = [scores.null_one(len(targets[s].residues)) for s in pair_sequence]
    batch = launch.TailBatch.build(
        launch.ModelPack(profiles), residues, offsets, pair_model, pair_sequence, null1, pipelines[0], 42
    )
    scratch, out = batch.bounds()
    outputs = run_batch(batch)
    results = readback.read_back(batch, outputs, out, outputs["out"].ctypes.data, targets.__getitem__, pipelines)
    assert [status for status, _, _ in results] == [launch.OK] * len(pairs)
    found = {(int(p["model"]), int(p["sequence"])): record for p, (_, _, record) in zip(batch.pairs, results)}
    compared = 0
    for m, hmm in enumerate(models):
        mine = [found[m, s] for model, s in pairs if model == m and found[m, s] is not None]
        searched = [sequences[chosen[s]] for model, s in pairs if model == m]
        block = pyhmmer.easel.DigitalSequenceBlock(alphabet, searched)
        expected = pyhmmer.plan7.Pipeline(alphabet, **options).search_hmm(hmm, block)
        rebuilt = records.build_tophits(hmm, mine, pipelines[m])
        assert _records(rebuilt) == _records(expected), (setting, hmm.name)
        assert _tables(rebuilt) == _tables(expected), (setting, hmm.name)
        compared += len(mine)
    assert compared >= (len(CASES) if setting == "default" else 1)


def test_multi_domain_cases_are_clustered(cases):
    """The cases' multi-domain regions reach the kernel's sampling and clustering."""
    models, profiles, residues, offsets, targets, pairs, sequences, chosen = cases
    pipeline = records.pipeline_settings(pyhmmer.plan7.Pipeline(sequences[0].alphabet), models[0])
    pair_model, pair_sequence = (np.array(column) for column in zip(*pairs))
    null1 = [scores.null_one(len(targets[s].residues)) for s in pair_sequence]
    batch = launch.TailBatch.build(
        launch.ModelPack(profiles), residues, offsets, pair_model, pair_sequence, null1, pipeline, 42
    )
    outputs = run_batch(batch)
    clustered = batch.pairs[outputs["counts"].reshape(-1, 4)[:, 1] > 0]
    found = sorted((models[p["model"]].name, chosen[p["sequence"]]) for p in clustered)
    assert found == sorted(MULTI_DOMAIN_REGIONS)
