"""The numpy reference of HMMER's stages after the Forward filter (tests/oracle: fwdback,
decoding, null2, optacc, stotrace, spensemble, domaindef, pipeline) against pyhmmer, and HMMER's
serialized hit records (hits/records).

The reference's hits are compared with pyhmmer's field by field (every number of every hit and
domain, and each domain's alignment display), and the tables pyhmmer's writers print from a
TopHits rebuilt from our records with pyhmmer's own, byte for byte, under several threshold
settings. The cases are cheap (model, target) pairs of the test data that reach the tail, single-
and multi-domain regions among them.
"""

from __future__ import annotations

import numpy as np
import pyhmmer
import pytest

from gpuhmm.hits import records

from helpers.tail import (
    CASES,
    MULTI_DOMAIN_REGIONS,
    SETTINGS,
    records_of,
    striped_profiles,
    tables_of,
    unthresholded,
    without_garbage,
)
from oracle import records as oracle_records
from oracle.pipeline import (
    forward_parser,
    null_one,
    passes_forward_filter,
    score_hit,
    search_target,
    target_domains,
)
from oracle.target import Target


@pytest.fixture(scope="module")
def tail(pfam_test_data):
    """The models by name, their striped profiles, and per case its target, Forward score and
    domain definition (computed once: the threshold settings only change the scoring)."""
    hmms, sequences = pfam_test_data
    models = {hmm.name: hmm for hmm in hmms if hmm.name in {name for name, _ in CASES}}
    profiles = striped_profiles(list(models.values()))
    defined = {}
    for name, index in CASES:
        target = Target.from_digital(sequences[index])
        fwd, fwdsc = forward_parser(profiles[name], target)
        defined[name, index] = (target, fwdsc, target_domains(profiles[name], target, fwd))
    return models, profiles, defined


def test_cases_reach_both_kinds_of_region(tail):
    _, _, defined = tail
    clustered = [case for case, (_, _, definition) in defined.items() if definition.nclustered]
    assert sorted(clustered) == sorted(MULTI_DOMAIN_REGIONS)


@pytest.mark.parametrize("setting", SETTINGS)
def test_hits_and_tables_equal_pyhmmer(tail, pfam_test_data, setting):
    models, profiles, defined = tail
    _, sequences = pfam_test_data
    alphabet = sequences[0].alphabet
    compared = 0
    for name, hmm in models.items():
        indices = sorted(index for model, index in CASES if model == name)
        options = dict(Z=len(sequences), **SETTINGS[setting])
        block = pyhmmer.easel.DigitalSequenceBlock(alphabet, [sequences[i] for i in indices])
        expected = pyhmmer.plan7.Pipeline(alphabet, **options).search_hmm(hmm, block)
        pipeline = records.pipeline_settings(pyhmmer.plan7.Pipeline(alphabet, **options), hmm)
        ours = []
        for index in indices:
            target, fwdsc, definition = defined[name, index]
            hit = score_hit(profiles[name], target, fwdsc, definition, pipeline)
            if hit is not None:
                ours.append(hit)
        rebuilt = oracle_records.build_tophits(hmm, ours, pipeline)
        assert records_of(rebuilt) == records_of(expected), (setting, name)
        assert rebuilt.__getstate__()["hit"] == expected.__getstate__()["hit"], (setting, name)
        assert tables_of(rebuilt) == tables_of(expected), (setting, name)
        compared += len(ours)
    assert compared >= (len(CASES) if setting == "default" else 1)


def test_forward_filter_decisions(pfam_test_data):
    """F3 on the Forward parser's score, as pyhmmer decides it with the earlier filters open and
    no bias filter (its filter score is then null1); search_target stops where F3 fails."""
    hmms, sequences = pfam_test_data
    hmm = next(h for h in hmms if h.name == "HTH_3")
    profile = striped_profiles([hmm])[hmm.name]
    rng = np.random.default_rng(5)
    short = [i for i, s in enumerate(sequences) if len(s.sequence) <= 400]
    chosen = sorted(set(rng.choice(short, 30, replace=False).tolist()) | {34, 226, 304})
    options = dict(F1=1.0, F2=1.0, bias_filter=False, Z=len(sequences))
    settings = records.pipeline_settings(pyhmmer.plan7.Pipeline(hmm.alphabet, **options), hmm)
    outcomes = []
    for index in chosen:
        block = pyhmmer.easel.DigitalSequenceBlock(hmm.alphabet, [sequences[index]])
        searched = pyhmmer.plan7.Pipeline(hmm.alphabet, **options).search_hmm(hmm, block)
        passed = searched.__getstate__()["pipeline"]["n_past_fwd"] == 1
        target = Target.from_digital(sequences[index])
        null1 = null_one(len(target.residues))
        _, fwdsc = forward_parser(profile, target)
        assert passes_forward_filter(profile, fwdsc, null1, settings["F3"]) == passed, index
        if not passed:
            assert search_target(profile, target, settings, filter_score=null1) is None
        outcomes.append(passed)
    assert 3 <= sum(outcomes) < len(outcomes)


def test_search_target_is_the_whole_tail(tail, pfam_test_data):
    """The public entry point, bias filter off (filter score null1), gives pyhmmer's hit before
    the hit list is thresholded (no flags yet)."""
    models, profiles, _ = tail
    _, sequences = pfam_test_data
    name, index = "HTH_3", 226  # a multi-domain region
    hmm = models[name]
    options = dict(bias_filter=False, Z=len(sequences))
    block = pyhmmer.easel.DigitalSequenceBlock(hmm.alphabet, [sequences[index]])
    (expected,) = records_of(pyhmmer.plan7.Pipeline(hmm.alphabet, **options).search_hmm(hmm, block))
    target = Target.from_digital(sequences[index])
    settings = records.pipeline_settings(pyhmmer.plan7.Pipeline(hmm.alphabet, **options), hmm)
    hit = search_target(profiles[name], target, settings, filter_score=null_one(len(target.residues)))
    assert without_garbage(hit) == unthresholded(expected)


def test_records_round_trip_every_hit(pfam_test_data):
    """Every hit pyhmmer finds in the test data decodes and re-encodes to its own bytes, and a
    TopHits rebuilt from the decoded records (flags cleared) writes pyhmmer's tables."""
    hmms, sequences = pfam_test_data
    alphabet = sequences[0].alphabet
    block = pyhmmer.easel.DigitalSequenceBlock(alphabet, sequences)
    total = 0
    for hmm in hmms:
        pipeline = pyhmmer.plan7.Pipeline(alphabet, Z=len(sequences))
        hits = pipeline.search_hmm(hmm, block)
        decoded = []
        for raw in hits.__getstate__()["unsrt"]:
            data = bytes(raw)
            hit = records.decode_hit(data)
            assert records.encode_hit(hit) == data, (hmm.name, hit.name)
            decoded.append(unthresholded(hit))
        settings = records.pipeline_settings(pyhmmer.plan7.Pipeline(alphabet, Z=len(sequences)), hmm)
        rebuilt = oracle_records.build_tophits(hmm, decoded, settings)
        assert records_of(rebuilt) == records_of(hits), hmm.name
        assert tables_of(rebuilt) == tables_of(hits), hmm.name
        total += len(decoded)
    assert total == 170
