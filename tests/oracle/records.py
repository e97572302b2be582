"""HMMER 3.4's records of a hit as `p7_Pipeline` creates them (`src/p7_pipeline.c`,
`p7_alidisplay_Create`): the HitRecords and AlignmentRecords of `gpuhmm.hits.records`, built from
the reference's results, the flags set at hit creation, and a pyhmmer TopHits of them: the
reference the kernels' serialized records are checked against.
"""

from __future__ import annotations

from pyhmmer.easel import VectorU8

from gpuhmm.hits.records import IS_INCLUDED, IS_REPORTED, AlignmentRecord, HitRecord, encode_hit, tophits_of_buffers
from gpuhmm.stages.tail.scores import reportable


def _as_text(value):
    """A name as records hold it: text, whose bytes that are not UTF-8 are surrogate escapes
    (as `decode_hit` reads them), from the bytes a target or profile holds."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def alignment_record(profile, target, lines, *, hmmfrom, hmmto, sqfrom, sqto):
    """`p7_alidisplay_Create`'s record of a domain of `target` (a `target.Target`) aligned to
    `profile` (a `StripedProfile`): `lines` are model, mline, aseq, ppline, rfline and csline,
    the last two None where the model has no such annotation."""
    model, mline, aseq, ppline, rfline, csline = lines
    return AlignmentRecord(
        N=len(model),
        hmmfrom=hmmfrom,
        hmmto=hmmto,
        M=profile.M,
        sqfrom=sqfrom,
        sqto=sqto,
        L=len(target.residues),
        model=model,
        mline=mline,
        aseq=aseq,
        ppline=ppline,
        rfline=rfline,
        csline=csline,
        hmmname=_as_text(profile.name),
        hmmacc=_as_text(profile.accession or ""),
        hmmdesc=_as_text(profile.description or ""),
        sqname=_as_text(target.name),
        sqacc=_as_text(target.accession),
        sqdesc=_as_text(target.description),
    )


def hit_record(target, *, inc_by_E, flags, scores, lnPs, definition, best_domain, domains):
    """The `P7_HIT` `p7_Pipeline` creates for `target` (a `target.Target`): `scores` and `lnPs`
    are the (score, pre_score, sum_score) triples, `definition` is (nexpected, nregions,
    nclustered, noverlaps, nenvelopes); the sort key is −lnP when inclusion goes by E-value
    (`inc_by_E`), else the score."""
    (score, pre_score, sum_score), (lnP, pre_lnP, sum_lnP) = scores, lnPs
    nexpected, nregions, nclustered, noverlaps, nenvelopes = definition
    return HitRecord(
        name=_as_text(target.name),
        accession=_as_text(target.accession) or None,
        description=_as_text(target.description) or None,
        sortkey=-lnP if inc_by_E else float(score),
        score=float(score),
        pre_score=float(pre_score),
        sum_score=float(sum_score),
        lnP=lnP,
        pre_lnP=pre_lnP,
        sum_lnP=sum_lnP,
        nexpected=float(nexpected),
        nregions=int(nregions),
        nclustered=int(nclustered),
        noverlaps=int(noverlaps),
        nenvelopes=int(nenvelopes),
        flags=flags,
        nreported=0,
        nincluded=0,
        best_domain=int(best_domain),
        domains=tuple(domains),
    )


def domain_flags(pipeline, bitscore, lnP):
    """(is_reported, is_included) of a domain as `p7_Pipeline` sets them at hit creation: by the
    model's own cutoffs under `--cut_*` (pyhmmer keeps those), else left to the thresholding."""
    if not pipeline["use_bit_cutoffs"]:
        return False, False
    reported = reportable(pipeline, bitscore, lnP, "dom_by_E", "domE", "domT", "domZ")
    return reported, reported and reportable(pipeline, bitscore, lnP, "incdom_by_E", "incdomE", "incdomT", "domZ")


def hit_flags(pipeline, score, lnP):
    """A new hit's flags: reported, and included by the model's own cutoffs, under `--cut_*`."""
    if not pipeline["use_bit_cutoffs"]:
        return 0
    return IS_REPORTED | (IS_INCLUDED if reportable(pipeline, score, lnP, "inc_by_E", "incE", "incT", "Z") else 0)


def build_tophits(query, hits, pipeline):
    """`records.tophits_of_buffers` of HitRecords (in the order the targets were searched)."""
    return tophits_of_buffers(query, [VectorU8(bytearray(encode_hit(hit))) for hit in hits], pipeline)
