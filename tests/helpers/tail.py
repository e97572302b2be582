"""The tail's cases: cheap (model, target) pairs of the test data that reach the stages after the
Forward filter, single- and multi-domain regions among them; the pyhmmer settings each is checked
under; records and tables as compared with pyhmmer's; and the whole tail built for the host."""

from __future__ import annotations

import ctypes
import dataclasses
import io

import numpy as np
import pyhmmer

from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.hits import records
from gpuhmm.stages import vitfilter
from gpuhmm.stages.tail import launch, schedule
from gpuhmm.stages.tail.profile import StripedProfile

from . import tail_build
from oracle.target import Target

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


def without_garbage(hit):
    """A record less the fields hmmsearch never sets (pyhmmer serializes stale memory there)."""
    domains = tuple(dataclasses.replace(d, iorf=0, jorf=0) for d in hit.domains)
    return dataclasses.replace(hit, window_length=0, seqidx=0, subseq_start=0, domains=domains)


def unthresholded(hit):
    """A record as p7_Pipeline creates it, before p7_tophits_Threshold flags and counts."""
    domains = tuple(dataclasses.replace(d, is_reported=False, is_included=False) for d in hit.domains)
    return dataclasses.replace(hit, flags=0, nreported=0, nincluded=0, domains=domains)


def records_of(hits):
    return [without_garbage(records.decode_hit(bytes(raw))) for raw in hits.__getstate__()["unsrt"]]


def tables_of(hits):
    tables = {}
    for form in TABLE_FORMATS:
        handle = io.BytesIO()
        hits.write(handle, format=form, header=False)
        tables[form] = handle.getvalue()
    return tables


def striped_profiles(hmms):
    written = vitfilter.configured(hmms, pyhmmer.plan7.Background(hmms[0].alphabet))
    return {hmm.name: StripedProfile.from_configured(*configured) for hmm, configured in zip(hmms, written)}


SHIM = """
#include "stages.cuh"
using namespace gpuhmm::tail;
extern "C" void tail_stage(const Tail *t, int stage, int count) {
    for (int item = 0; item < count; item++) {
        if (stage == 0) run_lane_group([&](const LaneGroup &g) { parse_pair(t, t->nwide + item, g); });
        else if (stage == 1) run_lane_group([&](const LaneGroup &g) { region_forward_item(t, item, g); });
        else if (stage == 2) run_lane_group([&](const LaneGroup &g) { rescore_envelope(t, t->nwide + item, g); });
        else if (stage == 3) assemble_pair(t, item);
        else if (stage == 4) serialize_pair(t, item);
        else if (stage == 5) region_traces_item(t, item, this_warp());
        else if (stage == 6) region_envelopes_item(t, item, this_warp());
        else if (stage == 7) run_wide_group([&](const WideGroup &w) { parse_pair(t, item, w); });
        else run_wide_group([&](const WideGroup &w) { rescore_envelope(t, item, w); });
    }
}
"""


class HostDevice:
    """`schedule.run`'s device for the host build: numpy arrays, each stage a loop over its items."""

    def __init__(self):
        self.lib = tail_build.build(SHIM)
        self.lib.tail_stage.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        self.launched = []

    xp = np
    put = staticmethod(np.copy)
    item_clocks = None

    @staticmethod
    def fetch(arrays):
        return [np.copy(array) for array in arrays]

    @staticmethod
    def resident(array):
        return array

    @staticmethod
    def empty(nbytes):
        return np.zeros(nbytes, np.uint8)

    @staticmethod
    def address(array):
        return array.ctypes.data

    def launch(self, stage, count, struct, beside=False):
        self.launched.append((stage, count))
        self.lib.tail_stage(struct, stage, count)

    def join(self):
        pass


def run_batch(batch, budget=1 << 30):
    """Every pair of `batch` (a TailBatch) through the host build of the stages: their outputs."""
    return schedule.run(batch, HostDevice(), budget)


class HostTailEngine(ReferenceEngine):
    """The numpy filters, and the tail through the host build; with `refuse`, every refuse-th
    pair of a batch comes back as beyond the kernel's capacity, and with `refused(name)`, every
    pair whose target's name it holds for, however the pairs are batched."""

    def __init__(self, refuse=0, refused=None):
        super().__init__(90, warps=8)
        self.refuse, self.refused = refuse, refused
        self.pairs = 0

    def tail(self, batch, timing=None):
        outputs = run_batch(batch)
        if self.refuse:
            outputs["status"][:: self.refuse] = launch.CAPACITY
        if self.refused:
            names = [batch.names[3 * int(sequence)] for sequence in batch.pairs["sequence"]]
            outputs["status"][[self.refused(name) for name in names]] = launch.CAPACITY
        self.pairs += len(batch.pairs)
        return outputs


def install_host_tail(monkeypatch, engine):
    """`engine` as every worker's GPU, the tail queue giving it pairs of the tests' small jobs
    too (no latency, no serial chain, no wait for jobs to join) and grouping none on the host."""
    from gpuhmm import placement
    from gpuhmm.worker import STATE, tailqueue

    monkeypatch.setattr(placement, "gpu_problem", lambda: None)
    monkeypatch.setattr(STATE, "gpu_engine", engine)
    monkeypatch.setattr(tailqueue, "GPU_LATENCY", 0.0)
    monkeypatch.setattr(tailqueue, "GPU_CHAIN_SECONDS", 0.0)
    monkeypatch.setattr(tailqueue, "GATHER_SECONDS", 0.0)
    monkeypatch.setattr(tailqueue, "HOST_GROUP", 1)
    return engine


def batch_cases(pfam_test_data):
    """The cases as one batch: models, striped profiles, residues, offsets, targets, (model,
    target) pairs, the proteins and the chosen targets' indices."""
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
