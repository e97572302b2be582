"""HMMER 3.4's alignment display of a domain (`src/p7_alidisplay.c`): `p7_alidisplay_Create` for
an OA trace without an index (the display runs from the first M after the first B to the last M
before the next E) and `p7_alidisplay_EncodePostProb`.

No float arithmetic beyond the posterior's encoding, done in double as HMMER does:
p + 0.05 ≥ 1 gives '*', else the digit ⌊(p + 0.05)·10⌋.
"""

from __future__ import annotations

from .oprofile import emission
from .records import alignment_record


def encode_posterior(p):
    """`p7_alidisplay_EncodePostProb`: one posterior probability as a display character."""
    shifted = float(p) + 0.05
    return "*" if shifted >= 1.0 else chr(int(shifted * 10.0) + ord("0"))


def create(trace, profile, target):
    """`p7_alidisplay_Create(tr, 0, om, sq, NULL)`: the alignment of `trace` (an OA trace in
    `target`'s coordinates, with posteriors) to `profile`."""
    z1 = trace.st.index("M", trace.st.index("B"))
    z2 = trace.st.index("E", z1)
    while trace.st[z2] != "M":
        z2 -= 1
    steps = range(z1, z2 + 1)
    abc, residues = profile.alphabet, target.residues
    model, mline, aseq = [], [], []
    for z in steps:
        state, k = trace.st[z], trace.k[z]
        x = residues[trace.i[z] - 1] if state != "D" else None
        if state == "M":
            model.append(profile.consensus[k - 1])
            if x == abc.code(profile.consensus[k - 1]):
                mline.append(profile.consensus[k - 1])
            else:
                mline.append("+" if emission(profile, x, k) > 1.0 else " ")
            aseq.append(abc.symbols[x].upper())
        elif state == "I":
            model.append(".")
            mline.append(" ")
            aseq.append(abc.symbols[x].lower())
        else:
            model.append(profile.consensus[k - 1])
            mline.append(" ")
            aseq.append("-")

    def annotation(line):
        return None if line is None else "".join("." if trace.st[z] == "I" else line[trace.k[z] - 1] for z in steps)

    lines = (
        "".join(model),
        "".join(mline),
        "".join(aseq),
        "".join("." if trace.st[z] == "D" else encode_posterior(trace.pp[z]) for z in steps),
        annotation(profile.reference),
        annotation(profile.structure),
    )
    return alignment_record(
        profile, target, lines, hmmfrom=trace.k[z1], hmmto=trace.k[z2], sqfrom=trace.i[z1], sqto=trace.i[z2]
    )
