"""kernels/tail/serialize.cuh (built for the host) against `hits.records.encode_hit` and pyhmmer:
every hit pyhmmer finds among the tail's cases, written by the kernel code from its numbers, is
byte for byte the `p7_hit_Serialize` record `encode_hit` writes for it as `p7_Pipeline` creates it,
and the TopHits built from the written bytes (`records.tophits_of_buffers`) equals pyhmmer's, records and
tables, under every setting; names that are not UTF-8 pass through unchanged."""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np
import pyhmmer
import pytest
from pyhmmer.easel import VectorU8

from gpuhmm.hits import records
from gpuhmm.hits.text import model_text
from gpuhmm.stages.tail import launch, serialized

from helpers import tail_build
from helpers.tail import CASES, SETTINGS, records_of, tables_of, unthresholded, without_garbage
from oracle import records as oracle_records
from oracle.target import Target

F32 = np.float32

SHIM = """
#include "serialize.cuh"
using namespace gpuhmm::tail;
extern "C" {
void pair_names(Names *out, const char *models, const long long *model_offsets, int model, const char *targets,
                const long long *target_offsets, int target) {
    *out = table_names(models, model_offsets, model, targets, target_offsets, target);
}
tail_size_t record_bytes(const Hit *hit, const Domain *domains, int ndom, int lines, const Names *names) {
    return hit_record_bytes(hit, domains, ndom, lines, names);
}
tail_size_t write_record(char *out, const Hit *hit, const Domain *domains, int ndom, float nexpected,
                         const int *counts, int M, int L, int has_rf, int has_cs, const Names *names,
                         const RecordSettings *settings) {
    return write_hit_record(out, hit, domains, ndom, nexpected, counts, M, L, has_rf, has_cs, names, settings);
}
}
"""
#: Filler of the output buffer past the record: what is left of it shows nothing wrote there.
FILLER = 0xA5


def library():
    lib = tail_build.build(SHIM)
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    lib.pair_names.argtypes = [pointer, pointer, pointer, ctypes.c_int, pointer, pointer, ctypes.c_int]
    lib.record_bytes.argtypes = [pointer, pointer, ctypes.c_int, ctypes.c_int, pointer]
    lib.record_bytes.restype = size
    lib.write_record.argtypes = [pointer, pointer, pointer, ctypes.c_int, ctypes.c_float, pointer]
    lib.write_record.argtypes += [ctypes.c_int] * 4 + [pointer, pointer]
    lib.write_record.restype = size
    return lib


class Text(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_void_p), ("length", ctypes.c_size_t)]


class Names(ctypes.Structure):
    """kernels/tail/serialize.cuh's Names, field for field."""

    _fields_ = [
        (f"{owner}_{name}", Text) for owner in ("model", "target") for name in ("name", "accession", "description")
    ]


def pair_names(lib, models, model, targets, target):
    """The kernel's `table_names` of a pair from two `serialized.NameTable`s."""
    names = Names()
    tables = (models.blob, models.offsets, model, targets.blob, targets.offsets, target)
    lib.pair_names(ctypes.byref(names), *(t if isinstance(t, int) else t.ctypes.data for t in tables))
    return names


def flagged(hit, pipeline):
    """`hit` (unthresholded) with the flags p7_Pipeline sets at its creation under `pipeline`'s
    bit cutoffs (scores.py's reading of them)."""
    domains = []
    for d in hit.domains:
        reported, included = oracle_records.domain_flags(pipeline, F32(d.bitscore), d.lnP)
        domains.append(dataclasses.replace(d, is_reported=reported, is_included=included))
    flags = oracle_records.hit_flags(pipeline, F32(hit.score), hit.lnP)
    return dataclasses.replace(hit, flags=flags, domains=tuple(domains))


def created(hit, pipeline):
    """A record pyhmmer returned, as p7_Pipeline creates it: no counts, no stale memory, flags
    only under bit cutoffs (from scores.py; `merge` keeps them, so the TopHits checks them)."""
    hit = unthresholded(without_garbage(hit))
    return flagged(hit, pipeline) if pipeline["use_bit_cutoffs"] else hit


def write(lib, record, names, settings):
    """The kernel's record of `record`'s numbers and lines (a HitRecord) for `names`, checked to
    be `record_bytes` long and to write nothing past that."""
    hit = launch.Hit(1, 1, record.best_domain, record.score, record.pre_score, record.sum_score)
    hit.lnP, hit.pre_lnP, hit.sum_lnP = record.lnP, record.pre_lnP, record.sum_lnP
    domains, texts = (launch.Domain * len(record.domains))(), []
    for slot, d in zip(domains, record.domains):
        ad = d.alignment
        lines = [ad.model, ad.mline, ad.aseq, ad.ppline] + [x for x in (ad.rfline, ad.csline) if x is not None]
        texts.append(ctypes.create_string_buffer("".join(lines).encode("ascii")))
        slot.ienv, slot.jenv, slot.iali, slot.jali = d.ienv, d.jenv, d.iali, d.jali
        slot.hmmfrom, slot.hmmto, slot.N = ad.hmmfrom, ad.hmmto, ad.N
        slot.envsc, slot.domcorrection, slot.dombias, slot.oasc = d.envsc, d.domcorrection, d.dombias, d.oasc
        slot.bitscore, slot.lnP, slot.text = d.bitscore, d.lnP, ctypes.addressof(texts[-1])
    ad = record.domains[0].alignment
    has_rf, has_cs = int(ad.rfline is not None), int(ad.csline is not None)
    ndom, names, settings = len(record.domains), ctypes.byref(names), ctypes.byref(settings)
    size = lib.record_bytes(ctypes.byref(hit), domains, ndom, 4 + has_rf + has_cs, names)
    out = ctypes.create_string_buffer(bytes([FILLER]) * (size + 256), size + 256)
    counts = (ctypes.c_int * 4)(record.nregions, record.nclustered, record.noverlaps, record.nenvelopes)
    written = lib.write_record(
        out, ctypes.byref(hit), domains, ndom, record.nexpected, counts, ad.M, ad.L, has_rf, has_cs, names, settings
    )
    assert written == size
    assert out.raw[size:] == bytes([FILLER]) * 256
    return out.raw[:size]


def search(hmm, sequences, options):
    """pyhmmer's hits of `hmm` among `sequences`, and its TopHits pipeline dict."""
    alphabet = hmm.alphabet
    block = pyhmmer.easel.DigitalSequenceBlock(alphabet, sequences)
    hits = pyhmmer.plan7.Pipeline(alphabet, **options).search_hmm(hmm, block)
    return hits, records.pipeline_settings(pyhmmer.plan7.Pipeline(alphabet, **options), hmm)


def written_tophits(lib, hmm, hits, pipeline, names):
    """The kernel's records of pyhmmer's `hits` (each written for `names[target name]`), checked
    against `encode_hit`, then as a TopHits against `hits`; returns the records."""
    settings = serialized.record_settings(pipeline)
    made, blob, offsets = [], b"", [0]
    for raw in hits.__getstate__()["unsrt"]:
        record = created(records.decode_hit(bytes(raw)), pipeline)
        data = write(lib, record, names[record.name.encode("utf-8", "surrogateescape")], settings)
        assert data == records.encode_hit(record), (hmm.name, record.name)
        made.append(record)
        blob += data
        offsets.append(len(blob))
    data = bytearray(blob)
    buffers = [VectorU8(memoryview(data)[a:b]) for a, b in zip(offsets[:-1], offsets[1:])]
    rebuilt = records.tophits_of_buffers(hmm, buffers, pipeline)
    assert records_of(rebuilt) == records_of(hits), hmm.name
    assert tables_of(rebuilt) == tables_of(hits), hmm.name
    return made


@pytest.mark.parametrize("setting", SETTINGS)
def test_records_equal_encode_hit_and_pyhmmer(tail_cases, setting):
    models, profiles, residues, offsets, targets, pairs, sequences, chosen = tail_cases
    lib = library()
    model_names, target_names = serialized.NameTable.of(profiles), serialized.NameTable.of(targets)
    options = dict(Z=len(sequences), bias_filter=False, **SETTINGS[setting])
    made = []
    for m, hmm in enumerate(models):
        searched = [s for model, s in pairs if model == m]
        names = {targets[s].name: pair_names(lib, model_names, m, target_names, s) for s in searched}
        hits, pipeline = search(hmm, [sequences[chosen[s]] for s in searched], options)
        made += written_tophits(lib, hmm, hits, pipeline, names)
    # What the cases cover, so each path of the writer is compared.
    alignments = [d.alignment for hit in made for d in hit.domains]
    assert len(made) >= (len(CASES) if setting == "default" else 1)
    assert any(ad.rfline is not None for ad in alignments) and any(ad.rfline is None for ad in alignments)
    assert any(ad.csline is not None for ad in alignments) and any(ad.csline is None for ad in alignments)
    assert any(hit.description is None for hit in made) and any(hit.description for hit in made)
    if setting == "gathering cutoffs":
        flags = {(d.is_reported, d.is_included) for hit in made for d in hit.domains}
        assert {hit.flags for hit in made} == {records.IS_REPORTED | records.IS_INCLUDED}
        assert flags == {(True, True), (False, False)}


def test_bit_cutoffs_set_each_flag_from_its_threshold(tail_cases):
    """Distinct thresholds under bit cutoffs: a hit below incT is reported, not included; a domain
    is reported from domT and included from incdomT."""
    models, profiles, residues, offsets, targets, pairs, sequences, chosen = tail_cases
    lib = library()
    model_names, target_names = serialized.NameTable.of(profiles), serialized.NameTable.of(targets)
    seen = set()
    for m, hmm in enumerate(models):
        searched = [s for model, s in pairs if model == m]
        by_name = {targets[s].name: s for s in searched}
        hits, pipeline = search(hmm, [sequences[chosen[s]] for s in searched], dict(Z=len(sequences)))
        bits = sorted(d.score for hit in hits for d in hit.domains)
        cutoffs = dict(T=-1e3, incT=hits[0].score - 1e-3, domT=bits[len(bits) // 2], incdomT=bits[-1])
        pipeline = dict(pipeline, use_bit_cutoffs=1, by_E=False, inc_by_E=False, dom_by_E=False, incdom_by_E=False)
        pipeline.update(cutoffs)
        settings = serialized.record_settings(pipeline)
        for raw in hits.__getstate__()["unsrt"]:
            record = flagged(unthresholded(without_garbage(records.decode_hit(bytes(raw)))), pipeline)
            record = dataclasses.replace(record, sortkey=record.score)  # inclusion by score
            names = pair_names(lib, model_names, m, target_names, by_name[record.name.encode()])
            assert write(lib, record, names, settings) == records.encode_hit(record), (hmm.name, record.name)
            seen |= {(record.flags, d.is_reported, d.is_included) for d in record.domains}
    reported, included = records.IS_REPORTED, records.IS_REPORTED | records.IS_INCLUDED
    assert {f for f, _, _ in seen} == {reported, included}
    assert {(r, i) for _, r, i in seen} == {(False, False), (True, False), (True, True)}


def test_names_pass_through_as_bytes(tail_cases, tmp_path):
    """A target named and described in Latin-1, one with an accession, and a model without
    accession or description: the record holds their bytes, and empty names where unset."""
    models, profiles, residues, offsets, targets, pairs, sequences, chosen = tail_cases
    lib = library()
    hmm = next(m for m in models if m.name == "ABC_tran").copy()  # the model with an RF line
    hmm.accession = hmm.description = None
    plain = sequences[next(index for name, index in CASES if name == "ABC_tran")]
    fasta = tmp_path / "latin1.faa"
    fasta.write_bytes(b">caf\xe9_1 prot\xe9ine \xab\xa0ABC\xa0\xbb\n" + plain.textize().sequence.encode() + b"\n")
    with pyhmmer.easel.SequenceFile(str(fasta), digital=True, alphabet=hmm.alphabet) as handle:
        latin1 = handle.read()
    accessioned = plain.copy()
    accessioned.name, accessioned.accession = f"{plain.name}_acc", "ACC0001.1"
    searched = [Target.from_digital(s) for s in (plain, latin1, accessioned)]
    assert searched[1].name == b"caf\xe9_1" and searched[1].description == b"prot\xe9ine \xab\xa0ABC\xa0\xbb"
    model_names = serialized.NameTable([b or b"" for b in model_text(hmm)])
    target_names = serialized.NameTable.of(searched)
    assert [target_names[i] for i in range(3, 6)] == [searched[1].name, b"", searched[1].description]
    hits, pipeline = search(hmm, [plain, latin1, accessioned], dict(Z=len(sequences)))
    names = {t.name: pair_names(lib, model_names, 0, target_names, i) for i, t in enumerate(searched)}
    made = written_tophits(lib, hmm, hits, pipeline, names)
    assert len(made) == 3
    latin = next(hit for hit in made if hit.name.startswith("caf"))
    assert latin.name.encode("utf-8", "surrogateescape") == b"caf\xe9_1"
    assert next(hit for hit in made if hit.accession).accession == "ACC0001.1"
    assert {(d.alignment.hmmacc, d.alignment.hmmdesc) for hit in made for d in hit.domains} == {("", "")}
    assert all(d.alignment.rfline is not None for hit in made for d in hit.domains)


def test_name_tables_take_and_join_as_lists_do():
    strings = [b"", b"a", b"bc", b"\xe9def", b"", b"ghij"]
    table = serialized.NameTable(strings)
    chosen = [5, 0, 3, 3, 1]
    taken = table.take(chosen)
    assert [taken[i] for i in range(len(chosen))] == [strings[i] for i in chosen]
    joined = serialized.NameTable.joined([taken, table, serialized.NameTable([])])
    expected = [strings[i] for i in chosen] + strings
    assert [joined[i] for i in range(len(expected))] == expected
    assert len(joined.offsets) == len(expected) + 1
