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

import dataclasses
import io

import numpy as np
import pyhmmer
import pytest

from gpuhmm.hits import records
from gpuhmm.stages import vitfilter
from gpuhmm.stages.tail.profile import StripedProfile
from gpuhmm.stages.tail.target import Target

from oracle.pipeline import (
    forward_parser,
    null_one,
    passes_forward_filter,
    score_hit,
    search_target,
    target_domains,
)

#: (model, index of the target in proteins.faa): what each adds.
SINGLE_DOMAIN_REGIONS = (
    ("Fer4", 185),  # the domain sum overrides the sequence score
    ("TPR_1", 148),  # the same, a target without description
    ("HAMP", 373),
    ("PTS_EIIB", 202),
    ("HTH_AraC", 309),
    ("CBS", 381),
    ("S1", 174),
    ("HAMP", 383),  # three regions
    ("Fer4", 344),  # six regions, the best domain not the first
    ("HTH_3", 34),  # two regions, the best domain not the first
    ("HisKA", 159),  # three regions, sum override, best domain not the first
    ("DUF6304", 394),  # no consensus structure line; M ≥ 100: Forward's D→D early exit
    ("Response_reg", 239),
    ("AAA", 340),
    ("Acetyltransf_1", 14),
    ("ABC_tran", 162),  # a reference (RF) line
    ("DUF6072", 325),
    ("Radical_SAM", 254),
    ("HATPase_c", 97),
    ("ABC_tran", 342),  # RF line, sum override, best domain not the first
    ("BPD_transp_1", 357),
    ("GTP_EFTU", 193),
    ("tRNA-synt_1g", 141),  # M = 391
    ("ABC_membrane", 177),
)
#: Regions resolved by 200 stochastic traces and clustering.
MULTI_DOMAIN_REGIONS = (
    ("HTH_3", 226),
    ("HisKA", 331),
    ("Radical_SAM", 323),  # two overlapping envelopes from one region
    ("ABC_tran", 71),
    ("AAA", 214),
    ("GTP_EFTU", 176),  # two domains
    ("Hydrolase", 64),
    ("SBP_bac_1", 61),  # M = 315
    ("BPD_transp_1", 277),  # two clustered regions, overlaps, sum override
)
CASES = SINGLE_DOMAIN_REGIONS + MULTI_DOMAIN_REGIONS

#: pyhmmer Pipeline options, each checked on every case.
SETTINGS = {
    "default": {},
    "no null2": {"null2": False},
    "gathering cutoffs": {"bit_cutoffs": "gathering"},
    "score thresholds": {"T": 25.0, "domT": 12.0, "incT": 40.0, "incdomT": 30.0},
    "strict E-values": {"E": 1e-20, "domE": 1e-8, "incE": 1e-30, "incdomE": 1e-12},
}
TABLE_FORMATS = ("targets", "domains", "pfam")


def _without_garbage(hit):
    """A record less the fields hmmsearch never sets (pyhmmer serializes stale memory there)."""
    domains = tuple(dataclasses.replace(d, iorf=0, jorf=0) for d in hit.domains)
    return dataclasses.replace(hit, window_length=0, seqidx=0, subseq_start=0, domains=domains)


def _unthresholded(hit):
    """A record as p7_Pipeline creates it, before p7_tophits_Threshold flags and counts."""
    domains = tuple(dataclasses.replace(d, is_reported=False, is_included=False) for d in hit.domains)
    return dataclasses.replace(hit, flags=0, nreported=0, nincluded=0, domains=domains)


def _records(hits):
    return [_without_garbage(records.decode_hit(bytes(raw))) for raw in hits.__getstate__()["unsrt"]]


def _tables(hits):
    tables = {}
    for form in TABLE_FORMATS:
        handle = io.BytesIO()
        hits.write(handle, format=form, header=False)
        tables[form] = handle.getvalue()
    return tables


def _profiles(hmms):
    written = vitfilter.configured(hmms, pyhmmer.plan7.Background(hmms[0].alphabet))
    return {hmm.name: StripedProfile.from_configured(*configured) for hmm, configured in zip(hmms, written)}


@pytest.fixture(scope="module")
def tail(pfam_test_data):
    """The models by name, their striped profiles, and per case its target, Forward score and
    domain definition (computed once: the threshold settings only change the scoring)."""
    hmms, sequences = pfam_test_data
    models = {hmm.name: hmm for hmm in hmms if hmm.name in {name for name, _ in CASES}}
    profiles = _profiles(list(models.values()))
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
        rebuilt = records.build_tophits(hmm, ours, pipeline)
        assert _records(rebuilt) == _records(expected), (setting, name)
        assert rebuilt.__getstate__()["hit"] == expected.__getstate__()["hit"], (setting, name)
        assert _tables(rebuilt) == _tables(expected), (setting, name)
        compared += len(ours)
    assert compared >= (len(CASES) if setting == "default" else 1)


def test_forward_filter_decisions(pfam_test_data):
    """F3 on the Forward parser's score, as pyhmmer decides it with the earlier filters open and
    no bias filter (its filter score is then null1); search_target stops where F3 fails."""
    hmms, sequences = pfam_test_data
    hmm = next(h for h in hmms if h.name == "HTH_3")
    profile = _profiles([hmm])[hmm.name]
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
    (expected,) = _records(pyhmmer.plan7.Pipeline(hmm.alphabet, **options).search_hmm(hmm, block))
    target = Target.from_digital(sequences[index])
    settings = records.pipeline_settings(pyhmmer.plan7.Pipeline(hmm.alphabet, **options), hmm)
    hit = search_target(profiles[name], target, settings, filter_score=null_one(len(target.residues)))
    assert _without_garbage(hit) == _unthresholded(expected)


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
            decoded.append(_unthresholded(hit))
        settings = records.pipeline_settings(pyhmmer.plan7.Pipeline(alphabet, Z=len(sequences)), hmm)
        rebuilt = records.build_tophits(hmm, decoded, settings)
        assert _records(rebuilt) == _records(hits), hmm.name
        assert _tables(rebuilt) == _tables(hits), hmm.name
        total += len(decoded)
    assert total == 170
