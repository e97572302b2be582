"""HMMER 3.4's domain definition (`src/p7_domaindef.c`): `p7_domaindef_ByPosteriorHeuristics`
with `is_multidomain_region`, `region_trace_ensemble` and `rescore_isolated_domain`, in
hmmsearch's (not nhmmer's long-target) form, bit for bit.

From the posterior B, E and core occupancies of the parser matrices (`decoding.domain_decoding`),
regions open and close with the thresholds rt1 = 0.25 and rt2 = 0.10 (float32 comparisons of
float32 differences). A region whose expected domain count reaches rt3 = 0.20 is sampled: 200
stochastic traces through its multihit Forward matrix (the generator reseeded for each such
region), clustered into envelopes, with each residue's null2 score the glibc `logf` of its mean
null2 odds over the samples (one float32 addition per sample, in sample order; outside the
sampled domains, and at each domain's first residue, the addend is 1). Any other region is one
envelope whose null2 scores come from its posteriors (`p7_Null2_ByExpectation`, then `logf`).
Each envelope is rescored in unihit mode (for the full target length): Forward (`envsc`),
Backward, posterior decoding, optimal accuracy (`oasc`) and its trace, which gives the alignment;
`domcorrection` is the float32 sum of the envelope's null2 scores in residue order.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuhmm.hits.records import DomainRecord
from gpuhmm.stages.tail.profile import F32
from gpuhmm.stages.vitfilter import libm_logf

from . import alidisplay
from .decoding import decoding, domain_decoding
from .fwdback import backward, forward
from .null2 import null2_by_expectation, null2_by_trace
from .oprofile import special_transitions
from .optacc import oa_trace, optimal_accuracy
from .spensemble import Segments, cluster
from .stotrace import stochastic_trace

#: `p7_domaindef_Create`'s region thresholds and sample count (hmmsearch never changes them).
RT1, RT2, RT3 = F32(0.25), F32(0.10), F32(0.20)
NSAMPLES = 200


@dataclasses.dataclass(frozen=True)
class DomainDefinition:
    """What `p7_domaindef_ByPosteriorHeuristics` leaves in `P7_DOMAINDEF`."""

    nexpected: np.float32
    nregions: int
    nclustered: int
    noverlaps: int
    nenvelopes: int
    domains: tuple[DomainRecord, ...]  # dombias, bitscore, lnP still 0, as HMMER leaves them
    null2_scores: np.ndarray  # float32 (L + 1,): n2sc, per residue (0 outside regions)


def _logf(values):
    logf = libm_logf()
    return np.array([logf(float(v)) for v in values], dtype=F32)


def _in_order_sum(values):
    """A float32 sum from 0 in order, as a C loop does."""
    return np.add.accumulate(np.concatenate([np.zeros(1, dtype=F32), values]))[-1]


def is_multidomain_region(posteriors, i, j):
    """`is_multidomain_region`: whether some split point expects rt3 domains on both sides."""
    z = np.arange(i, j + 1)
    ends = posteriors.etot[z] - posteriors.etot[i - 1]
    begins = posteriors.btot[j] - posteriors.btot[z - 1]
    expected = np.where(ends < begins, ends, begins)
    return max(F32(-1.0), expected.max()) >= RT3


def rescore_isolated_domain(profile, target, xf, i, j, null2_scores, null2_is_done):
    """`rescore_isolated_domain`: the domain of envelope i..j (unihit `xf`), or None where
    posterior decoding overflows. Without `null2_is_done`, sets the envelope's null2 scores."""
    residues = target.residues[i - 1 : j]
    fwd, envsc = forward(profile, residues, xf, full=True)
    bck = backward(profile, residues, xf, fwd, full=True)
    posteriors = decoding(xf, fwd, bck)
    if posteriors is None:
        return None
    oa, oasc = optimal_accuracy(profile, xf, posteriors)
    trace = oa_trace(profile, xf, posteriors, oa)
    trace.i = [position + i - 1 if position > 0 else 0 for position in trace.i]
    alignment = alidisplay.create(trace, profile, target)
    if not null2_is_done:
        null2 = null2_by_expectation(profile, posteriors)
        null2_scores[i : j + 1] = _logf(null2[residues])
    return DomainRecord(
        ienv=i,
        jenv=j,
        iali=alignment.sqfrom,
        jali=alignment.sqto,
        envsc=float(envsc),
        domcorrection=float(_in_order_sum(null2_scores[i : j + 1])),
        dombias=0.0,
        oasc=float(oasc),
        bitscore=0.0,
        lnP=0.0,
        is_reported=False,
        is_included=False,
        alignment=alignment,
    )


def region_trace_ensemble(profile, target, xf, i, j, rng, null2_scores):
    """`region_trace_ensemble`: the envelopes of multi-domain region i..j (multihit `xf`), from
    sampled traces; sets the region's null2 scores."""
    residues = target.residues[i - 1 : j]
    fwd, _ = forward(profile, residues, xf, full=True)
    rng.reseed()
    odds = np.zeros(len(residues), dtype=F32)
    found = []
    for sample in range(NSAMPLES):
        trace = stochastic_trace(rng, profile, xf, fwd)
        addend = np.ones(len(residues), dtype=F32)
        for domain in trace.domains():
            found.append((sample, domain.sqfrom + i - 1, domain.sqto + i - 1, domain.hmmfrom, domain.hmmto))
            null2 = null2_by_trace(profile, trace, domain.tfrom, domain.tto)
            inside = slice(domain.sqfrom, domain.sqto)  # residues after the domain's first
            addend[inside] = null2[residues[inside]]
        odds = odds + addend
    null2_scores[i : j + 1] = _logf(odds / F32(NSAMPLES))
    segments = Segments(*(np.array(column, dtype=np.int64) for column in zip(*found)))
    envelopes = cluster(segments, NSAMPLES)
    # Of two envelopes overlapping by 80% of the shorter, the less probable one is dominated (on
    # a tie, the first); the scan for an envelope stops at the first that starts right after it
    # ends (HMMER tests for an overlap of exactly 0).
    dominated = [False] * len(envelopes)
    for d, first in enumerate(envelopes):
        for d2 in range(d + 1, len(envelopes)):
            second = envelopes[d2]
            overlap = min(first.j, second.j) - max(first.i, second.i) + 1
            if overlap == 0:
                break
            shorter = min(first.j - first.i + 1, second.j - second.i + 1)
            if float(F32(overlap) / F32(shorter)) >= 0.8:
                dominated[d2 if first.prob > second.prob else d] = True
    return [envelope for envelope, out in zip(envelopes, dominated) if not out]


def define_domains(profile, target, fwd, bck, rng):
    """`p7_domaindef_ByPosteriorHeuristics` from the Forward and Backward parser matrices of the
    whole target (multihit), with `rng` the pipeline's generator (`stotrace.FastRandomness`)."""
    L = len(target.residues)
    multihit, unihit = special_transitions(L, multihit=True), special_transitions(L, multihit=False)
    posteriors = domain_decoding(multihit, fwd, bck)
    mocc, btot, etot = posteriors.mocc, posteriors.btot, posteriors.etot
    null2_scores = np.zeros(L + 1, dtype=F32)
    counts = dict(nregions=0, nclustered=0, noverlaps=0, nenvelopes=0)
    domains = []
    start, triggered = -1, False  # a region still open at L is dropped, as in HMMER
    for j in range(1, L + 1):
        if not triggered:
            if mocc[j] - (btot[j] - btot[j - 1]) < RT2:
                start = j
            elif start == -1:
                start = j
            triggered = bool(mocc[j] >= RT1)
            continue
        if not mocc[j] - (etot[j] - etot[j - 1]) < RT2:
            continue
        i = start
        counts["nregions"] += 1
        if is_multidomain_region(posteriors, i, j):
            counts["nclustered"] += 1
            last_end = 0
            for envelope in region_trace_ensemble(profile, target, multihit, i, j, rng, null2_scores):
                counts["noverlaps"] += envelope.i <= last_end
                counts["nenvelopes"] += 1
                domain = rescore_isolated_domain(profile, target, unihit, envelope.i, envelope.j, null2_scores, True)
                if domain is not None:
                    domains.append(domain)
                    last_end = envelope.j
        else:
            counts["nenvelopes"] += 1
            domain = rescore_isolated_domain(profile, target, unihit, i, j, null2_scores, False)
            if domain is not None:
                domains.append(domain)
        start, triggered = -1, False
    return DomainDefinition(nexpected=btot[L], domains=tuple(domains), null2_scores=null2_scores, **counts)
