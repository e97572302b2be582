"""The whole tail (kernels/tail/, built for the host) against pyhmmer: every (model, target) pair
of the domain-definition cases runs from the Forward parser to the hit in C++, and the hits,
rebuilt into a TopHits (`hits.records`), equal pyhmmer's field by field and print the same
tables, under several threshold settings."""

from __future__ import annotations

import re

import numpy as np
import pyhmmer
import pytest

from gpuhmm.engine.kernelcache import KERNELS
from gpuhmm.engine.taildevice import TailDevice
from gpuhmm.hits import records
from gpuhmm.stages.tail import launch, readback, schedule, scores, serialized

from helpers.tail import CASES, MULTI_DOMAIN_REGIONS, SETTINGS, HostDevice, records_of, run_batch, tables_of


@pytest.mark.parametrize("setting", SETTINGS)
def test_hits_and_tables_equal_pyhmmer(tail_cases, setting):
    models, profiles, residues, offsets, targets, pairs, sequences, chosen = tail_cases
    alphabet = sequences[0].alphabet
    options = dict(Z=len(sequences), bias_filter=False, **SETTINGS[setting])
    pipelines = [records.pipeline_settings(pyhmmer.plan7.Pipeline(alphabet, **options), m) for m in models]
    pair_model, pair_sequence = (np.array(column) for column in zip(*pairs))
    null1 = [scores.null_one(len(targets[s].residues)) for s in pair_sequence]
    chosen_targets = (residues, offsets, serialized.NameTable.of(targets))
    batch = launch.TailBatch.build(
        launch.ModelPack(profiles), chosen_targets, pair_model, pair_sequence, null1, pipelines, 42
    )
    results = readback.read_back(batch, run_batch(batch))
    assert [status for status, _, _ in results] == [launch.OK] * len(pairs)
    found = {(int(p["model"]), int(p["sequence"])): record for p, (_, _, record) in zip(batch.pairs, results)}
    compared = 0
    for m, hmm in enumerate(models):
        mine = [found[m, s] for model, s in pairs if model == m and found[m, s] is not None]
        searched = [sequences[chosen[s]] for model, s in pairs if model == m]
        block = pyhmmer.easel.DigitalSequenceBlock(alphabet, searched)
        expected = pyhmmer.plan7.Pipeline(alphabet, **options).search_hmm(hmm, block)
        rebuilt = records.tophits_of_buffers(hmm, mine, pipelines[m])
        assert records_of(rebuilt) == records_of(expected), (setting, hmm.name)
        assert tables_of(rebuilt) == tables_of(expected), (setting, hmm.name)
        compared += len(mine)
    assert compared >= (len(CASES) if setting == "default" else 1)


def _default_batch(tail_cases):
    models, profiles, residues, offsets, targets, pairs, sequences, chosen = tail_cases
    pipeline = records.pipeline_settings(pyhmmer.plan7.Pipeline(sequences[0].alphabet), models[0])
    pair_model, pair_sequence = (np.array(column) for column in zip(*pairs))
    null1 = [scores.null_one(len(targets[s].residues)) for s in pair_sequence]
    return launch.TailBatch.build(
        launch.ModelPack(profiles),
        (residues, offsets, serialized.NameTable.of(targets)),
        pair_model,
        pair_sequence,
        null1,
        [pipeline] * len(models),
        42,
    )


def test_multi_domain_cases_are_clustered(tail_cases):
    """The cases' multi-domain regions reach the kernel's sampling and clustering."""
    models, chosen = tail_cases[0], tail_cases[-1]
    batch = _default_batch(tail_cases)
    results = readback.read_back(batch, run_batch(batch))
    clustered = [p for p, (_, _, r) in zip(batch.pairs, results) if records.decode_hit(bytes(r)).nclustered > 0]
    found = sorted((models[p["model"]].name, chosen[p["sequence"]]) for p in clustered)
    assert found == sorted(MULTI_DOMAIN_REGIONS)


def test_arenas_over_the_budget_split_the_launches_alone(tail_cases):
    """A budget smaller than every arena gives each region and envelope a launch of its own;
    the outputs are those of one launch per stage."""
    batch = _default_batch(tail_cases)
    whole, split = HostDevice(), HostDevice()
    expected, outputs = schedule.run(batch, whole, 1 << 30), schedule.run(batch, split, 1)
    for name in ("status", "hits", "records", "record_offsets"):
        assert outputs[name].tobytes() == expected[name].tobytes(), name
    items = outputs["items"]
    assert items["clustered"] > 1 and items["envelopes"] > items["clustered"]
    clustered, envelopes = items["clustered"], items["envelopes"]
    stages = (schedule.REGIONS, schedule.TRACES, schedule.CLUSTERS, schedule.ENVELOPES)
    for stage, count in zip(stages, (clustered, clustered, clustered, envelopes)):
        assert [n for s, n in whole.launched if s == stage] == [count]
        assert [n for s, n in split.launched if s == stage] == [1] * count


@pytest.mark.parametrize("threshold", ["WIDE_PAIR_CELLS", "WIDE_ENVELOPE_CELLS"])
def test_items_on_a_warp_give_the_lane_groups_outputs(tail_cases, monkeypatch, threshold):
    """Every pair's parsers, or every envelope, on a warp (kernels/tail/wide.cuh): the same bytes
    as on the lane groups, whose outputs are pyhmmer's; the cases' models span Q < 8 (fewer parts
    than a warp has) to M ≥ 100 (Forward's early exit)."""
    batch = _default_batch(tail_cases)
    nodes = batch.nodes()
    assert nodes.min() < 29 and nodes.max() >= 100
    expected = run_batch(batch)
    monkeypatch.setattr(launch, threshold, 0)
    device = HostDevice()
    outputs = schedule.run(batch, device, 1 << 30)
    wide, counted = {
        "WIDE_PAIR_CELLS": (schedule.PARSE_WIDE, "pairs"),
        "WIDE_ENVELOPE_CELLS": (schedule.ENVELOPES_WIDE, "envelopes"),
    }[threshold]
    items = outputs["items"][counted]
    assert (wide, items) in device.launched
    assert outputs["items"][f"{counted}_on_warps"] == items and expected["items"][f"{counted}_on_warps"] == 0
    for name in ("status", "hits", "records", "record_offsets"):
        assert outputs[name].tobytes() == expected[name].tobytes(), name


@pytest.mark.parametrize("group", [1, 3, 4])
def test_items_go_costliest_first_in_units_of_one_model(group):
    rng = np.random.default_rng(7)
    cost, model = rng.integers(1, 50, 103), rng.integers(0, 9, 103)
    order = schedule._in_units(np, cost, model, group)
    assert sorted(order.tolist()) == list(range(103))
    # Each model's items, costliest first (ties in item order), cut `group` at a time.
    by_model = sorted(range(103), key=lambda item: (model[item], -cost[item], item))
    units = [order[start : start + group].tolist() for start in range(0, 103, group)]
    firsts = [unit[0] for unit in units]
    assert sorted(sum(units, []), key=by_model.index) == by_model
    assert all(by_model.index(unit[-1]) - by_model.index(unit[0]) == len(unit) - 1 for unit in units)
    whole = firsts[: 103 // group]
    assert [cost[item] for item in whole] == sorted((cost[item] for item in whole), reverse=True)


def test_the_launch_bounds_hold_the_launches_block():
    """tail.cu bounds its kernels' registers for TailDevice's blocks; a larger block would not launch."""
    source = (KERNELS / "tail" / "tail.cu").read_text()
    assert re.search(r"constexpr int TAIL_THREADS = (\d+);", source).group(1) == str(TailDevice.THREADS)
