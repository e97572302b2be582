"""What `kernels/tail/` writes (`schedule.run`'s outputs), read back as HMMER's hit records
(`hits.records`): the hit and domain fields, each domain's alignment lines
(`p7_alidisplay_Create`), and the flags `p7_Pipeline` sets at hit creation.
"""

from __future__ import annotations

import numpy as np

from ...hits.records import AlignmentRecord, DomainRecord, HitRecord
from .launch import MAX_DOMAINS, OK
from .scores import domain_flags, hit_flags, reportable

F32 = np.float32


def _alignment(profile, target, domain, text):
    N = int(domain["N"])
    count = 4 + (profile.reference is not None) + (profile.structure is not None)
    lines = [text[c * N : (c + 1) * N].decode("ascii") for c in range(count)]
    rf = lines.pop(4) if profile.reference is not None else None
    cs = lines.pop(4) if profile.structure is not None else None
    return AlignmentRecord.of(
        profile,
        target,
        (*lines, rf, cs),
        hmmfrom=int(domain["hmmfrom"]),
        hmmto=int(domain["hmmto"]),
        sqfrom=int(domain["iali"]),
        sqto=int(domain["jali"]),
    )


def hit_record(profile, target, pipeline, hit, domains, texts, definition):
    """The HitRecord of a pair the kernel finished (`hit`: a HIT_DTYPE row; `domains`: its
    DOMAIN_DTYPE rows, `texts` their lines; `definition`: nexpected and the four counts), or None
    where it is not reportable; thresholds as `p7_Pipeline` applies them at hit creation."""
    score, lnP = F32(hit["score"]), float(hit["lnP"])
    if not reportable(pipeline, score, lnP, "by_E", "E", "T", "Z"):
        return None
    records = []
    for d, text in zip(domains, texts):
        bitscore, d_lnP = F32(d["bitscore"]), float(d["lnP"])
        reported, included = domain_flags(pipeline, bitscore, d_lnP)
        records.append(
            DomainRecord(
                ienv=int(d["ienv"]),
                jenv=int(d["jenv"]),
                iali=int(d["iali"]),
                jali=int(d["jali"]),
                envsc=float(d["envsc"]),
                domcorrection=float(d["domcorrection"]),
                dombias=float(d["dombias"]),
                oasc=float(d["oasc"]),
                bitscore=float(bitscore),
                lnP=d_lnP,
                is_reported=reported,
                is_included=included,
                alignment=_alignment(profile, target, d, text),
            )
        )
    nexpected, counts = definition
    return HitRecord.of(
        target,
        inc_by_E=pipeline["inc_by_E"],
        flags=hit_flags(pipeline, score, lnP),
        scores=(score, F32(hit["pre_score"]), F32(hit["sum_score"])),
        lnPs=(lnP, float(hit["pre_lnP"]), float(hit["sum_lnP"])),
        definition=(nexpected, *counts),
        best_domain=hit["best_domain"],
        domains=records,
    )


def read_back(batch, outputs, targets, pipelines):
    """Per pair: (status, passed, HitRecord or None) from the stages' `outputs` (`schedule.run`);
    `targets(sequence)` is a `target.Target`, `pipelines[model]` the TopHits pipeline settings
    of each model."""
    results = []
    text, base = outputs["text"], outputs["text_base"]
    for p, pair in enumerate(batch.pairs):
        status, hit = int(outputs["status"][p]), outputs["hits"][p]
        if status != OK or not hit["passed"] or not hit["has_hit"]:
            results.append((status, bool(hit["passed"]), None))
            continue
        domains = outputs["domains"][p * MAX_DOMAINS : p * MAX_DOMAINS + outputs["ndomains"][p]]
        texts = [text[int(d["text"]) - base :][: 6 * int(d["N"])].tobytes() for d in domains]
        model, sequence = int(pair["model"]), int(pair["sequence"])
        definition = (outputs["nexpected"][p], outputs["counts"][4 * p : 4 * p + 4])
        profile = batch.models.profiles[model]
        record = hit_record(profile, targets(sequence), pipelines[model], hit, domains, texts, definition)
        results.append((status, True, record))
    return results
