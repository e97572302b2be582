"""Names, accessions and descriptions of pyhmmer's hits and sequences as the bytes HMMER holds.

HMMER keeps a FASTA header's bytes as they are and prints them back unchanged; pyhmmer decodes
them as UTF-8 and fails on other text (a Latin-1 description). These read the bytes
themselves where pyhmmer cannot: from a hit's serialized `P7_HIT`, or from the FASTA line
Easel writes for a sequence.
"""

from __future__ import annotations

import io

import pyhmmer.easel
import pyhmmer.plan7

from .records import decode_hit


def _encoded(*values):
    return tuple(None if value is None else value.encode() for value in values)


def _raw(value):
    return None if value is None else value.encode("utf-8", "surrogateescape")


def hit_text(hit):
    """(name, accession, description) of a pyhmmer `Hit`, as bytes; None where unset."""
    try:
        return _encoded(hit.name, hit.accession, hit.description)
    except UnicodeDecodeError:
        record = decode_hit(hit.__getstate__())
        return _raw(record.name), _raw(record.accession), _raw(record.description)


def sequence_text(sequence):
    """(name, accession, description) of a pyhmmer sequence, as bytes ("" where unset).

    A sequence whose text is not UTF-8 is read back from Easel's own FASTA line,
    `>name[ accession][ description]`: neither a name nor an accession holds a space.
    """
    try:
        return _encoded(sequence.name, sequence.accession, sequence.description)
    except UnicodeDecodeError:
        written = io.BytesIO()
        sequence.write(written)
        name, _, rest = written.getvalue().partition(b"\n")[0][1:].partition(b" ")
        accession, _, description = rest.partition(b" ") if _has_accession(sequence) else (b"", b"", rest)
        return name, accession, description


def _has_accession(sequence):
    try:
        return bool(sequence.accession)
    except UnicodeDecodeError:
        return True


def model_text(hmm):
    """(name, accession, description) of a pyhmmer `HMM`, as bytes (None where unset); one
    whose text is not UTF-8 (phmmer's model of such a query) is read from its HMMER text form."""
    try:
        return _encoded(hmm.name, hmm.accession, hmm.description)
    except UnicodeDecodeError:
        written = io.BytesIO()
        hmm.write(written, binary=False)
        fields = {}
        for line in written.getvalue().split(b"\n"):
            if line.startswith(b"HMM "):
                break
            tag, _, value = line.partition(b" ")
            fields.setdefault(tag, value.lstrip(b" "))
        return fields[b"NAME"], fields.get(b"ACC"), fields.get(b"DESC")


def text_of(item):
    """(name, accession, description) as bytes of a hit, a sequence or a model (a query)."""
    if isinstance(item, pyhmmer.plan7.Hit):
        return hit_text(item)
    if isinstance(item, pyhmmer.easel.Sequence):
        return sequence_text(item)
    if isinstance(item, pyhmmer.plan7.HMM):
        return model_text(item)
    return _encoded(item.name, item.accession, item.description)


def shown(value):
    """Bytes as text for a message, those that are not UTF-8 escaped."""
    return value.decode("utf-8", "backslashreplace")


def label(item):
    """The name of a hit, sequence or model, for a message."""
    return shown(text_of(item)[0])


def view(value):
    """Bytes as text of one character per byte (Latin-1), so that widths and cuts count bytes,
    as HMMER's printf does; such text is written back with the Latin-1 codec."""
    return "" if value is None else value.decode("latin-1")


def text_view(text):
    """Ordinary text (a file name, say) as `view` gives it: its UTF-8 bytes, one per character."""
    return text.encode("utf-8", "surrogateescape").decode("latin-1")
