"""HMMER 3.4's per-domain alignment display and its `-A` alignment file, from pyhmmer hits.

Reproduces, in our own Python:

* `p7_nontranslated_alidisplay_Print()` (`src/p7_alidisplay.c`, called by `p7_alidisplay_Print()`
  with a minimum of 40 alignment columns): an alignment cut into blocks that fit `--textw`.
* the `-A` output of `hmmsearch.c` and `phmmer.c`: `p7_tophits_Alignment()` with all consensus
  columns, named after the query, written by `esl_msafile_Write()` as Stockholm (Pfam format
  under `--notextw`). pyhmmer's `TopHits.to_msa` and `MSA.write` run those very functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import BinaryIO, TextIO

from pyhmmer.plan7 import Alignment, TopHits

from ..hits.records import alignment_record
from ..hits.text import text_of, text_view
from .report_header import HMMER_VERSION

#: Alignment columns a display block keeps whatever the line width (p7_tophits_Domains' choice).
MIN_ALIGNMENT_WIDTH = 40


def _text_width(number: int) -> int:
    """Characters of a printed integer; 0 for 0, as HMMER counts them."""
    return len(str(abs(number))) + (number < 0) if number else 0


def _annotation_rows(alignment: Alignment) -> tuple[list[tuple[str, str]], str | None]:
    """The CS/RF/MM lines above an alignment (in that order) and its PP line below, as (tag,
    text). pyhmmer exposes neither the consensus-structure nor the reference line, so they are
    read from HMMER's own serialized record of the alignment."""
    record = alignment_record(alignment.__getstate__())
    rows = (("CS", record.csline), ("RF", record.rfline), ("MM", record.mmline))
    return [(tag, text_view(line)) for tag, line in rows if line is not None], record.ppline


def write_alignment(handle: TextIO, alignment: Alignment, hmm_shown: str, seq_shown: str, textw: int) -> None:
    """One domain's alignment in blocks of at most `textw` characters (unlimited when 0).

    `hmm_shown`, `seq_shown`: the names to print, accessions under `--acc`, as `hits.text.view`s.
    """
    above, pp = _annotation_rows(alignment)
    model, mline, aseq = alignment.hmm_sequence, alignment.identity_sequence, alignment.target_sequence
    columns = len(model)
    namew = max(len(hmm_shown), len(seq_shown))
    coordw = max(map(_text_width, (alignment.hmm_from, alignment.hmm_to, alignment.target_from, alignment.target_to)))
    width = textw - namew - 2 * coordw - 5 if textw > 0 else columns
    if width < columns and width < MIN_ALIGNMENT_WIDTH:
        width = MIN_ALIGNMENT_WIDTH
    forward = alignment.target_from < alignment.target_to
    k1, i1 = alignment.hmm_from, alignment.target_from
    pad = namew + coordw + 1
    for start in range(0, columns, width):
        end = start + width
        if start:
            handle.write("\n")
        nk = sum(c != "." for c in model[start:end])  # insert columns do not advance the model
        ni = sum(c != "-" for c in aseq[start:end])  # delete columns do not advance the target
        k2 = k1 + nk - 1
        i2 = i1 + ni - 1 if forward else i1 - ni + 1
        handle.writelines(f"  {'':{pad}} {text[start:end]} {tag}\n" for tag, text in above)
        handle.write(f"  {hmm_shown:>{namew}} {k1:{coordw}d} {model[start:end]} {k2:<{coordw}d}\n")
        handle.write(f"  {'':{pad}} {mline[start:end]}\n")
        if ni > 0:
            handle.write(f"  {seq_shown:>{namew}} {i1:{coordw}d} {aseq[start:end]} {i2:<{coordw}d}\n")
        else:  # a block of deletions only
            handle.write(f"  {seq_shown:>{namew}} {'-':>{coordw}} {aseq[start:end]} {'-':>{coordw}}\n")
        if pp is not None:
            handle.write(f"  {'':{pad}} {pp[start:end]} PP\n")
        k1 += nk
        i1 += ni if forward else -ni


def included_domains(hits: TopHits) -> int:
    """How many domains p7_tophits_Alignment would align: included domains of included hits."""
    return sum(len(hit.domains.included) for hit in hits.included)


def write_alignments(
    handle: BinaryIO,
    hits: Sequence[TopHits],
    program: str = "hmmsearch",
    textw: int = 120,
    queries: Sequence[object] | None = None,
) -> None:
    """`-A`: one alignment per query with included domains, as `program` writes it.

    `program` is "hmmsearch" or "phmmer" (hmmscan has no `-A`); it names the author line.
    `queries` are the query HMMs or sequences when they are not the hits' own (see
    `report.write_report`): phmmer names the alignment after the query sequence.
    """
    if program not in ("hmmsearch", "phmmer"):
        raise ValueError(f"{program} writes no -A alignment")
    for index, found in enumerate(hits):
        if not included_domains(found):
            continue
        query = found.query if queries is None else queries[index]
        msa = found.to_msa(query.alphabet, all_consensus_cols=True)
        name, accession, description = text_of(query)
        msa.name = name
        msa.accession = accession or None
        msa.description = description or None
        msa.author = f"{program} (HMMER {HMMER_VERSION})"
        msa.write(handle, "stockholm" if textw > 0 else "pfam")
