"""FASTA records written in Easel's other sequence formats, for the tests: EMBL (UniProt's text
form) and GenBank, written here, and the alignment formats, written by pyhmmer from rows that
gaps make equally long. Every third record gets no accession, so that tables print `-` too."""

from __future__ import annotations

import textwrap

import pyhmmer

#: The alignment formats `write` writes, through pyhmmer, by Easel's names.
ALIGNMENTS = ("stockholm", "afa", "clustal", "a2m", "psiblast", "phylip", "selex", "pfam")


def records(path, names=None):
    """The records of a FASTA file as pyhmmer text sequences, in file order; only those named
    `names`, in that order, where given."""
    with pyhmmer.easel.SequenceFile(str(path), "fasta") as handle:
        found = list(handle)
    if names is None:
        return found
    by_name = {sequence.name: sequence for sequence in found}
    return [by_name[name] for name in names]


def _accession(index):
    return None if index % 3 == 2 else f"Q{index:05d}"


def _embl(sequences):
    lines = []
    for index, sequence in enumerate(sequences):
        residues = sequence.sequence.rstrip("*")
        lines.append(f"ID   {sequence.name}   Reviewed;   {len(residues)} AA.")
        if _accession(index):
            lines.append(f"AC   {_accession(index)}; P{index:05d};")
        lines += [f"DE   {line}" for line in textwrap.wrap(sequence.description, 60)]
        lines.append(f"SQ   SEQUENCE   {len(residues)} AA;  0 MW;  0 CRC64;")
        for start in range(0, len(residues), 60):
            line = residues[start : start + 60]
            lines.append("     " + " ".join(line[at : at + 10] for at in range(0, len(line), 10)))
        lines.append("//")
    return lines


def _genbank(sequences):
    lines = []
    for index, sequence in enumerate(sequences):
        residues = sequence.sequence.rstrip("*")
        lines.append(f"LOCUS       {sequence.name}    {len(residues)} aa    linear   BCT 01-JAN-2000")
        lines += [
            f"{'DEFINITION' if number == 0 else '':<12}{line}"
            for number, line in enumerate(textwrap.wrap(sequence.description or ".", 60))
        ]
        if _accession(index):
            lines += [f"ACCESSION   {_accession(index)}", f"VERSION     {_accession(index)}.1"]
        lines.append("ORIGIN")
        for start in range(0, len(residues), 60):
            line = residues[start : start + 60]
            lines.append(f"{start + 1:>9} " + " ".join(line[at : at + 10] for at in range(0, len(line), 10)))
        lines.append("//")
    return lines


def _alignment(sequences):
    """The sequences as the rows of an alignment: a few gaps in front, one after every 17
    residues, and as many at the end as make the rows equally long."""
    rows = []
    for index, sequence in enumerate(sequences):
        residues = sequence.sequence.rstrip("*")
        gapped = "".join(residue + "-" * (at % 17 == 16) for at, residue in enumerate(residues))
        rows.append("-" * (index % 3) + gapped)
    width = max(map(len, rows)) + 2
    return pyhmmer.easel.TextMSA(
        name=b"formats",
        sequences=[
            pyhmmer.easel.TextSequence(
                name=sequence.name,
                accession=_accession(index),
                description=sequence.description,
                sequence=row + "-" * (width - len(row)),
            )
            for index, (sequence, row) in enumerate(zip(sequences, rows))
        ],
    )


def write(sequences, path, format):
    """Write pyhmmer text `sequences` to `path` in `format`: embl, genbank or one of ALIGNMENTS."""
    if format in ALIGNMENTS:
        with open(path, "wb") as handle:
            _alignment(sequences).write(handle, format)
    else:
        lines = {"embl": _embl, "genbank": _genbank}[format](sequences)
        path.write_text("\n".join(lines) + "\n")
    return path
