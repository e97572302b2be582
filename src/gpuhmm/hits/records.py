"""HMMER 3.4's serialized hit records, and pyhmmer `TopHits` built from them.

`p7_hit_Serialize` (`src/p7_hit.c`) writes a `P7_HIT`, then each of its `P7_DOMAIN`s
(`p7_domain_Serialize`, `src/p7_domain.c`), each followed by its `P7_ALIDISPLAY`
(`p7_alidisplay_Serialize`, `src/p7_alidisplay.c`). Numbers are big-endian (floats and doubles as
their IEEE bits); strings are NUL-terminated. pyhmmer's `TopHits.__getstate__` holds one such
buffer per hit (`Hit.__getstate__`), and `__setstate__` reads them back with
`p7_hit_Deserialize`; `decode_hit` and `encode_hit` are the two directions in Python, so hits
computed outside pyhmmer become a `TopHits` (`tophits_of_buffers`) that pyhmmer's own writers print.

Fields HMMER never sets in hmmsearch (`window_length`, `seqidx`, `subseq_start`, `iorf`, `jorf`)
hold whatever memory held in pyhmmer's records; ours write 0. No writer reads them.
"""

from __future__ import annotations

import dataclasses
import struct

from pyhmmer.easel import DigitalSequenceBlock
from pyhmmer.plan7 import TopHits

#: `P7_HIT` flags that p7_Pipeline sets (`p7_hitflags_e`).
IS_INCLUDED, IS_REPORTED = 1, 2

_HIT = struct.Struct(">Iid3f3df5iIiiiqqB")  # through the presence byte (SER_BASE_SIZE = 109)
_DOMAIN = struct.Struct(">I6q5fdiii")  # through the count of per-position scores (92)
_ALIDISPLAY = struct.Struct(">I4i3qB")  # through the presence byte (45)
#: Optional alignment lines and their presence bits, in `P7_ALIDISPLAY` presence order; the
#: serialized order differs (see `_alidisplay_strings`).
_LINE_BITS = {"rfline": 1, "mmline": 2, "csline": 4, "ppline": 8, "aseq": 16, "ntseq": 32}
_NAMES = ("hmmname", "hmmacc", "hmmdesc", "sqname", "sqacc", "sqdesc")


@dataclasses.dataclass(frozen=True)
class AlignmentRecord:
    """A `P7_ALIDISPLAY`: one domain's alignment lines, coordinates and names."""

    N: int  # alignment columns
    hmmfrom: int
    hmmto: int
    M: int
    sqfrom: int
    sqto: int
    L: int
    model: str
    mline: str
    aseq: str | None
    ppline: str | None
    rfline: str | None
    csline: str | None
    hmmname: str
    hmmacc: str
    hmmdesc: str
    sqname: str
    sqacc: str
    sqdesc: str
    mmline: str | None = None
    ntseq: str | None = None


@dataclasses.dataclass(frozen=True)
class DomainRecord:
    """A `P7_DOMAIN`: envelope and alignment coordinates, scores (float32 values; lnP double)."""

    ienv: int
    jenv: int
    iali: int
    jali: int
    envsc: float
    domcorrection: float
    dombias: float
    oasc: float
    bitscore: float
    lnP: float
    is_reported: bool
    is_included: bool
    alignment: AlignmentRecord
    iorf: int = 0
    jorf: int = 0
    scores_per_pos: tuple[float, ...] = ()


@dataclasses.dataclass(frozen=True)
class HitRecord:
    """A `P7_HIT` with its domains."""

    name: str
    accession: str | None
    description: str | None
    sortkey: float
    score: float
    pre_score: float
    sum_score: float
    lnP: float
    pre_lnP: float
    sum_lnP: float
    nexpected: float
    nregions: int
    nclustered: int
    noverlaps: int
    nenvelopes: int
    flags: int
    nreported: int
    nincluded: int
    best_domain: int
    domains: tuple[DomainRecord, ...]
    window_length: int = 0
    seqidx: int = 0
    subseq_start: int = 0


def _text(value):
    return value.encode("utf-8", "surrogateescape") + b"\0"


class _Reader:
    def __init__(self, data):
        self.data, self.offset = bytes(data), 0

    def unpack(self, layout):
        values = layout.unpack_from(self.data, self.offset)
        self.offset += layout.size
        return values

    def text(self):
        end = self.data.index(b"\0", self.offset)
        value = self.data[self.offset : end].decode("utf-8", "surrogateescape")
        self.offset = end + 1
        return value


def _alidisplay_strings(ad):
    """The optional lines that are present, in serialized order: rf, mm, cs, model, mline, aseq,
    ntseq, pp; then the six names."""
    lines = [ad.rfline, ad.mmline, ad.csline, ad.model, ad.mline, ad.aseq, ad.ntseq, ad.ppline]
    return [line for line in lines if line is not None] + [getattr(ad, name) for name in _NAMES]


def _encode_alidisplay(ad):
    presence = sum(bit for name, bit in _LINE_BITS.items() if getattr(ad, name) is not None)
    strings = b"".join(_text(s) for s in _alidisplay_strings(ad))
    size = _ALIDISPLAY.size + len(strings)
    return _ALIDISPLAY.pack(size, ad.N, ad.hmmfrom, ad.hmmto, ad.M, ad.sqfrom, ad.sqto, ad.L, presence) + strings


def _decode_alidisplay(reader):
    start = reader.offset
    size, N, hmmfrom, hmmto, M, sqfrom, sqto, L, presence = reader.unpack(_ALIDISPLAY)
    lines = {}
    for name in ("rfline", "mmline", "csline", "model", "mline", "aseq", "ntseq", "ppline"):
        if name in ("model", "mline") or presence & _LINE_BITS[name]:
            lines[name] = reader.text()
        else:
            lines[name] = None
    names = {name: reader.text() for name in _NAMES}
    if reader.offset - start != size:
        raise ValueError(f"P7_ALIDISPLAY record of {size} bytes read as {reader.offset - start}")
    return AlignmentRecord(N=N, hmmfrom=hmmfrom, hmmto=hmmto, M=M, sqfrom=sqfrom, sqto=sqto, L=L, **lines, **names)


def _encode_domain(d):
    scores = struct.pack(f">{len(d.scores_per_pos)}f", *d.scores_per_pos)
    fixed = _DOMAIN.pack(
        _DOMAIN.size + len(scores),
        *(d.ienv, d.jenv, d.iali, d.jali, d.iorf, d.jorf),
        *(d.envsc, d.domcorrection, d.dombias, d.oasc, d.bitscore),
        d.lnP,
        int(d.is_reported),
        int(d.is_included),
        len(d.scores_per_pos),
    )
    return fixed + scores + _encode_alidisplay(d.alignment)


def _decode_domain(reader):
    start = reader.offset
    size, ienv, jenv, iali, jali, iorf, jorf, envsc, correction, bias, oasc, bits, lnP, rep, inc, n = reader.unpack(
        _DOMAIN
    )
    scores = reader.unpack(struct.Struct(f">{n}f"))
    if reader.offset - start != size:
        raise ValueError(f"P7_DOMAIN record of {size} bytes read as {reader.offset - start}")
    return DomainRecord(
        ienv=ienv,
        jenv=jenv,
        iali=iali,
        jali=jali,
        envsc=envsc,
        domcorrection=correction,
        dombias=bias,
        oasc=oasc,
        bitscore=bits,
        lnP=lnP,
        is_reported=bool(rep),
        is_included=bool(inc),
        alignment=_decode_alidisplay(reader),
        iorf=iorf,
        jorf=jorf,
        scores_per_pos=scores,
    )


def encode_hit(hit):
    """`p7_hit_Serialize` of `hit`: the bytes `Hit.__getstate__` gives."""
    strings = _text(hit.name)
    presence = 0
    if hit.accession is not None:
        strings += _text(hit.accession)
        presence |= 1
    if hit.description is not None:
        strings += _text(hit.description)
        presence |= 2
    fixed = _HIT.pack(
        _HIT.size + len(strings),
        hit.window_length,
        hit.sortkey,
        *(hit.score, hit.pre_score, hit.sum_score),
        *(hit.lnP, hit.pre_lnP, hit.sum_lnP),
        hit.nexpected,
        *(hit.nregions, hit.nclustered, hit.noverlaps, hit.nenvelopes, len(hit.domains)),
        *(hit.flags, hit.nreported, hit.nincluded, hit.best_domain),
        *(hit.seqidx, hit.subseq_start),
        presence,
    )
    return fixed + strings + b"".join(_encode_domain(d) for d in hit.domains)


def decode_hit(data):
    """`p7_hit_Deserialize`: the HitRecord in a `Hit.__getstate__` buffer."""
    reader = _Reader(data)
    (size, window, sortkey, score, pre, total, lnP, pre_lnP, sum_lnP, nexpected, *counts) = reader.unpack(_HIT)
    nregions, nclustered, noverlaps, nenvelopes, ndom, flags, nreported, nincluded, best = counts[:9]
    seqidx, subseq_start, presence = counts[9:]
    name = reader.text()
    accession = reader.text() if presence & 1 else None
    description = reader.text() if presence & 2 else None
    if reader.offset != size:
        raise ValueError(f"P7_HIT record of {size} bytes read as {reader.offset}")
    domains = tuple(_decode_domain(reader) for _ in range(ndom))
    if reader.offset != len(reader.data):
        raise ValueError(f"{len(reader.data) - reader.offset} bytes left after the P7_HIT record")
    return HitRecord(
        name=name,
        accession=accession,
        description=description,
        sortkey=sortkey,
        score=score,
        pre_score=pre,
        sum_score=total,
        lnP=lnP,
        pre_lnP=pre_lnP,
        sum_lnP=sum_lnP,
        nexpected=nexpected,
        nregions=nregions,
        nclustered=nclustered,
        noverlaps=noverlaps,
        nenvelopes=nenvelopes,
        flags=flags,
        nreported=nreported,
        nincluded=nincluded,
        best_domain=best,
        domains=domains,
        window_length=window,
        seqidx=seqidx,
        subseq_start=subseq_start,
    )


def check_hit(data):
    """That `data` holds one whole `P7_HIT` record, as `p7_hit_Deserialize` reads it, else
    ValueError. HMMER's reader trusts every size and string end it meets, and the table writers
    index by the best domain and by each alignment's length, so a record from elsewhere must be
    checked first; this walks the layout without building a HitRecord (faster than `decode_hit`)."""
    data = bytes(data)
    fields = _unpack(_HIT, data, 0)
    size, ndom, (reported, included, best), presence = fields[0], fields[14], fields[16:19], fields[21]
    if _strings_end(data, _HIT.size, 1 + bin(presence & 3).count("1"), size) != size:
        raise ValueError("P7_HIT names do not end where its size says")
    if not (0 <= best < ndom and 0 <= reported <= ndom and 0 <= included <= ndom):
        raise ValueError(f"best domain {best}, {reported} reported and {included} included of {ndom} domains")
    offset = size
    for _ in range(ndom):
        dsize, *_, nscores = _unpack(_DOMAIN, data, offset)
        if nscores < 0 or dsize != _DOMAIN.size + 4 * nscores:
            raise ValueError(f"P7_DOMAIN record of {dsize} bytes with {nscores} scores")
        offset += dsize
        asize, columns, *_, lines = _unpack(_ALIDISPLAY, data, offset)
        if lines & ~sum(_LINE_BITS.values()) or columns < 0:
            raise ValueError(f"P7_ALIDISPLAY with presence bits {lines} and {columns} columns")
        count = 2 + bin(lines).count("1") + len(_NAMES)
        ends = _strings_end(data, offset + _ALIDISPLAY.size, count, offset + asize, columns, lines)
        if ends != offset + asize:
            raise ValueError("P7_ALIDISPLAY strings do not end where its size says")
        offset = ends
    if offset != len(data):
        raise ValueError(f"{len(data) - offset} bytes left after the P7_HIT record")


def _unpack(layout, data, offset):
    if offset + layout.size > len(data):
        raise ValueError(f"record cut short at byte {len(data)}")
    return layout.unpack_from(data, offset)


def _strings_end(data, offset, count, end, columns=None, lines=0):
    """Where `count` NUL-terminated strings from `offset` end, each before `end`. With `columns`,
    they are an alignment's: its present lines (`lines`), nucleotides aside, `columns` long."""
    lengths = []
    for _ in range(count):
        stop = data.find(b"\0", offset, end)
        if stop < 0:
            raise ValueError(f"a string runs past its record's end at byte {end}")
        lengths.append(stop - offset)
        offset = stop + 1
    if columns is not None:
        order = ("rfline", "mmline", "csline", "model", "mline", "aseq", "ntseq", "ppline")
        present = [name for name in order if name in ("model", "mline") or lines & _LINE_BITS[name]]
        if any(length != columns for name, length in zip(present, lengths) if name != "ntseq"):
            raise ValueError(f"alignment lines are not {columns} columns long")
    return offset


def alignment_record(data):
    """`p7_alidisplay_Deserialize`: the AlignmentRecord in an `Alignment.__getstate__` buffer."""
    return _decode_alidisplay(_Reader(data))


def domain_counts(data):
    """(nexpected, nreported) of the P7_HIT record `data`, read from its fixed part alone."""
    fields = _HIT.unpack_from(bytes(data))
    return fields[9], fields[16]


def domain_oasc(data):
    """The optimal accuracy score (oasc) of the P7_DOMAIN record `data` (`Domain.__getstate__`)."""
    return _DOMAIN.unpack_from(bytes(data))[10]


def pipeline_settings(pipeline, query):
    """The `pipeline` part of a TopHits state for `query` searched with `pipeline`: its thresholds,
    Z and options (with bit cutoffs, the query's), from a search of no targets, with `pipeline`
    cleared before and after: its counts are zero but for this query's one model and its nodes
    (restate the rest, as `tophits` does); fields only nhmmer sets are left as pyhmmer has them."""
    pipeline.clear()
    state = pipeline.search_hmm(query, DigitalSequenceBlock(query.alphabet)).__getstate__()["pipeline"]
    pipeline.clear()
    return state


def tophits_of_buffers(query, buffers, pipeline):
    """A pyhmmer TopHits for `query` holding serialized hits (`buffers`: their `p7_hit_Serialize`
    records as pyhmmer VectorU8s, in the order the targets were searched) under `pipeline` (a
    TopHits state's pipeline dict), sorted and thresholded as pyhmmer's `search_hmm` ends:
    `p7_tophits_SortBySortkey`, then `p7_tophits_Threshold` (through `merge`, which clears the
    flags first unless bit cutoffs set them)."""
    state = {
        "_empty": False,
        "unsrt": buffers,
        "hit": list(range(len(buffers))),
        "Nalloc": len(buffers),
        "N": len(buffers),
        "nreported": 0,
        "nincluded": 0,
        "is_sorted_by_sortkey": False,
        "is_sorted_by_seqidx": False,
        "pipeline": dict(pipeline),
    }
    unsorted = TopHits(query)  # not TopHits.__new__: writing a TopHits without its query crashes
    unsorted.__setstate__(state)
    unsorted.sort(by="key")
    return unsorted.merge()
