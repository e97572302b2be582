"""HMMER 3.4's `p7_Pipeline` (`src/p7_pipeline.c`) for one target from the Forward filter on, in
hmmsearch mode: `p7_ForwardParser` and the F3 test, `p7_BackwardParser`, domain definition
(`domaindef`), then the per-sequence and per-domain scores and the hit, bit for bit.

Float rules kept: scores are float32 nats until the bit conversions `(float)((double)x / ln 2)`;
`log` is glibc's double log (Python's `math.log` calls it); the null1 score
`(float)(L·log(p1) + log(1 − p1))` with p1 = L ⊘ (L+1) in float32; the null2 sequence bias
`p7_FLogsum(0, (float)(log ω + Σ n2sc))` with the sum Kahan-compensated (`esl_vec_FSum`) and
`p7_FLogsum`'s table built as `p7_FLogsumInit` builds it; the length correction
`(float)(envsc + (L − Ld)·log(L ⊘ (L+3)))`; P-values `esl_exp_logsurv` in double.

hmmscan runs the same steps with the model's length reconfigured per sequence and names the hit
after the model; phmmer's only difference is where the query model comes from.
"""

from __future__ import annotations

import dataclasses
import math

from gpuhmm.stages.tail.profile import F32
from gpuhmm.stages.tail.scores import FLOGSUM_SCALE, flogsum_table, log_length, null_one, reportable

from .domaindef import define_domains
from .fwdback import backward, forward
from .oprofile import special_transitions
from .records import domain_flags, hit_flags, hit_record
from .stotrace import FastRandomness, kahan_sum

LOG_OMEGA = math.log(1.0 / 256.0)  # log(bg->omega), the prior of the null2 model


def flogsum(a, b):
    """`p7_FLogsum`: log(e^a + e^b) in float32 by table lookup."""
    a, b = F32(a), F32(b)
    high, low = (a, b) if a > b else (b, a)
    if low == -math.inf or high - low >= F32(15.7):
        return high
    return high + flogsum_table()[int((high - low) * FLOGSUM_SCALE)]


LN2 = 0.69314718055994529  # eslCONST_LOG2


def log_survival(score, tau, lam):
    """`esl_exp_logsurv`: log P of a bit score under the Forward exponential tail."""
    return 0.0 if float(score) < tau else -lam * (float(score) - tau)


def _bits(nats):
    return F32(float(nats) / LN2)


def passes_forward_filter(profile, fwdsc, filter_score, F3):
    """`p7_Pipeline`'s F3 test: P of (fwdsc − filtersc)/ln 2, a float32 bit score, at most F3."""
    bits = _bits(F32(fwdsc) - F32(filter_score))
    pvalue = 1.0 if float(bits) < profile.tau else math.exp(-profile.lam * (float(bits) - profile.tau))
    return not pvalue > F3


def score_hit(profile, target, fwdsc, definition, pipeline):
    """The end of `p7_Pipeline`: the hit of a target whose domains are `definition`, or None when
    it has no domain or is not reportable. `pipeline` is a TopHits state's pipeline dict
    (thresholds, Z, null2 and bit-cutoff settings)."""
    if not definition.nregions or not definition.nenvelopes or not definition.domains:
        return None
    L = len(target.residues)
    null2 = pipeline["do_null2"]
    nullsc = null_one(L)
    seqbias = flogsum(0.0, LOG_OMEGA + float(kahan_sum(definition.null2_scores))) if null2 else F32(0.0)
    pre_score = _bits(F32(fwdsc) - nullsc)
    seq_score = _bits(F32(fwdsc) - (nullsc + seqbias))

    # The score as a sum over domains that still score after their null2 correction.
    sum_score, bias, covered = F32(0.0), F32(0.0), 0
    for domain in definition.domains:
        counts = F32(domain.envsc) - F32(domain.domcorrection) > 0.0 if null2 else domain.envsc > 0.0
        if counts:
            sum_score = sum_score + F32(domain.envsc)
            covered += domain.jenv - domain.ienv + 1
            bias = bias + F32(domain.domcorrection)
    bias = flogsum(0.0, LOG_OMEGA + float(bias)) if null2 else F32(0.0)
    length_term = log_length(L)
    sum_score = F32(float(sum_score) + (L - covered) * length_term)
    pre2_score = _bits(sum_score - nullsc)
    sum_score = _bits(sum_score - (nullsc + bias))
    if covered > 0 and sum_score > seq_score:
        seq_score, pre_score = sum_score, pre2_score

    lnP = log_survival(seq_score, profile.tau, profile.lam)
    if not reportable(pipeline, seq_score, lnP, "by_E", "E", "T", "Z"):
        return None
    domains = []
    for domain in definition.domains:
        bitscore = F32(float(domain.envsc) + (L - (domain.jenv - domain.ienv + 1)) * length_term)
        dombias = flogsum(0.0, LOG_OMEGA + domain.domcorrection) if null2 else F32(0.0)
        bitscore = _bits(bitscore - (nullsc + dombias))
        domains.append(
            dataclasses.replace(
                domain,
                bitscore=float(bitscore),
                dombias=float(dombias),
                lnP=log_survival(bitscore, profile.tau, profile.lam),
            )
        )
    best = 0
    for d, domain in enumerate(domains):
        if domain.bitscore > domains[best].bitscore:
            best = d
    domains = [
        dataclasses.replace(d, **dict(zip(("is_reported", "is_included"), domain_flags(pipeline, d.bitscore, d.lnP))))
        for d in domains
    ]
    flags = hit_flags(pipeline, seq_score, lnP)
    return hit_record(
        target,
        inc_by_E=pipeline["inc_by_E"],
        flags=flags,
        scores=(seq_score, pre_score, sum_score),
        lnPs=(lnP, *(log_survival(s, profile.tau, profile.lam) for s in (pre_score, sum_score))),
        definition=(
            definition.nexpected,
            definition.nregions,
            definition.nclustered,
            definition.noverlaps,
            definition.nenvelopes,
        ),
        best_domain=best,
        domains=domains,
    )


def forward_parser(profile, target):
    """`p7_ForwardParser` of the whole target, multihit, for its length: (matrix, score)."""
    return forward(profile, target.residues, special_transitions(len(target.residues), multihit=True))


def target_domains(profile, target, fwd, seed=42):
    """`p7_BackwardParser` and `p7_domaindef_ByPosteriorHeuristics` after the Forward parser
    matrix `fwd`; `seed` is the pipeline's (reseeded for every multi-domain region, as HMMER does
    unless the seed is 0)."""
    bck = backward(profile, target.residues, special_transitions(len(target.residues), multihit=True), fwd)
    return define_domains(profile, target, fwd, bck, FastRandomness(seed))


def search_target(profile, target, pipeline, filter_score=None, seed=42):
    """`p7_Pipeline` from `p7_ForwardParser` on: the hit of `target` (a `target.Target`) for
    `profile` (an `oprofile.StripedProfile`) under `pipeline` (see `score_hit`), or None. With
    `filter_score` (the bias filter's score, or null1 without that filter) the F3 test comes
    first."""
    fwd, fwdsc = forward_parser(profile, target)
    if filter_score is not None and not passes_forward_filter(profile, fwdsc, filter_score, pipeline["F3"]):
        return None
    return score_hit(profile, target, fwdsc, target_domains(profile, target, fwd, seed), pipeline)
