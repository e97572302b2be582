"""HMMER's tables (`--tblout`, `--domtblout`, `--pfamtblout`), the domain table and the shuffle table.

The table bodies are HMMER's own writers, those pyhmmer's `TopHits.write` calls (`native`), so
byte-identical to hmmsearch's; only the footer names gpuhmm.
"""

from __future__ import annotations

import dataclasses
import io
import os
import time

from pyhmmer import easel, plan7

from .._version import __version__
from ..hits.text import text_of, text_view, view
from ..hits.tophits import attached
from . import native, parallel
from .files import written_together

#: The shuffle significance table's columns: the first six as tblout's, then the target's
#: Viterbi-filter score, the shuffles and their censored Gumbel fit, and the empirical P-value.
SHUFFLE_COLUMNS = (
    "target_name",
    "target_accession",
    "query_name",
    "query_accession",
    "E-value",
    "score",
    "viterbi_bits",
    "shuffles",
    "gumbel_mu",
    "gumbel_lambda",
    "empirical_P",
)


DOMAIN_COLUMNS = (
    "seq_id",
    "ali_start",
    "ali_end",
    "env_start",
    "env_end",
    "hmm_acc",
    "hmm_name",
    "hmm_start",
    "hmm_end",
    "hmm_length",
    "bit_score",
    "i_evalue",
    "c_evalue",
    "significant",
)


def write_outputs(hits, paths, footers=None, scan=False, shuffled=None, report=None, header=True, queries=None):
    """Write the requested outputs for the TopHits of each query in input order: models
    (hmmsearch), or sequences with `scan` (hmmscan). `paths` maps "output" (`-o`), "alignments"
    (`-A`), "tblout", "domtblout", "pfamtblout", "domains" and "shuffle_out" to paths, or to
    None where not wanted; `report` (a `report.Report`) is what the first two need, and
    `shuffled` holds the shuffle significance rows (SHUFFLE_COLUMNS). `header`: whether the
    HMMER tables open with their column header (phmmer leaves it out where its file's first
    query was empty, and so skipped). `queries`: the query each table names, where it is not the
    hits' own (phmmer's query sequences, see `Table`).

    Regular files appear together once all are whole (`files.written_together`). `footers`
    (`hmmer_footers`) close the HMMER tables, as hmmsearch's own do. E-values below the smallest normal
    double are 0, as the binaries print them (`hits.underflow`). The report and the HMMER
    tables are formatted by threads, a run of queries each (`parallel`).
    """
    footers = footers or {}
    per_query = {
        "output": report,
        **{
            kind: Table(format, tuple(footers.get(kind, ())), header, queries)
            for kind, format in (("tblout", "targets"), ("domtblout", "domains"), ("pfamtblout", "pfam"))
        },
    }
    whole = {
        "alignments": lambda handle, printed: report.write_alignments(handle, printed),
        "domains": lambda handle, printed: _write_domain_table(handle, printed, scan),
        "shuffle_out": lambda handle, printed: _write_shuffle_table(handle, shuffled),
    }
    # What goes to /dev/null is not even formatted: the workflow's jobs send their reports there.
    wanted = [kind for kind in (*per_query, *whole) if paths.get(kind) not in (None, os.devnull)]
    # A write that fails (a full disk, a closed pipe) is one line naming its output, as the
    # outputs close.
    with written_together([paths[kind] for kind in wanted]) as handles:
        opened = dict(zip(wanted, handles))
        printed = parallel.write_per_query(
            [(opened[kind], writer) for kind, writer in per_query.items() if kind in opened], hits
        )
        for kind, writer in whole.items():
            if kind in opened:
                writer(opened[kind], printed)


@dataclasses.dataclass(frozen=True)
class Table:
    """An HMMER table (`format` as pyhmmer's `TopHits.write` names it) as a `parallel.PerQuery`
    writer: HMMER's own writer (`native`) where it can be called, else pyhmmer's, then the
    `footer` lines. The rows name the hits' own query, or query `index` of `queries` where
    given: phmmer's tables take the query sequence's accession, which its model has not."""

    format: str
    footer: tuple[str, ...] = ()
    header: bool = True  # the column header before the first query's rows
    queries: list | None = None

    def prologue(self):
        return b""

    def write_query(self, out, index, hits, place):
        query = hits.query if self.queries is None else self.queries[index]
        if place is None or not isinstance(query, (plan7.HMM, easel.Sequence)):
            written = io.BytesIO()
            named = hits if self.queries is None else attached(hits.__getstate__(), query)
            named.write(written, format=self.format, header=self.header and index == 0)
            out.write(written.getvalue())
            return
        # the query's name and accession as pyhmmer hands them over: HMMER's own bytes
        name, accession, _ = text_of(query)
        native.write_table(out, place, self.format, self.header and index == 0, name, accession)

    def epilogue(self):
        # file names and the command line as the bytes the system gave them
        return os.fsencode("".join(f"{line}\n" for line in self.footer))


def _write_shuffle_table(handle, rows):
    """Names in `rows` are `hits.text.view`s: the table holds their bytes as they are."""
    lines = ["\t".join(SHUFFLE_COLUMNS)] + ["\t".join(map(str, row)) for row in rows]
    handle.write(("\n".join(lines) + "\n").encode("latin-1"))


def hmmer_footer(command, query_file, targets_file, program="hmmsearch", mode="SEARCH"):
    """The closing lines of an HMMER table, naming gpuhmm, the HMMER `program` whose rows it
    holds, its pipeline `mode` and the command that made it."""
    rows = [
        ("Program:", "gpuhmm"),
        ("Version:", f"{__version__} ({program} 3.4 rows, through pyhmmer)"),
        ("Pipeline mode:", mode),
        ("Query file:", str(query_file)),
        ("Target file:", str(targets_file)),
        ("Option settings:", command),
        ("Current dir:", os.getcwd()),
        ("Date:", time.strftime("%a %b %e %H:%M:%S %Y")),
    ]
    return ["#", *(f"# {key:<16} {value}" for key, value in rows), "# [ok]"]


def hmmer_footers(command, query_file, targets_file, program="hmmsearch"):
    """Each HMMER table's footer, by output name. hmmscan 3.4 names its sequence file as the
    query file, and says SCAN in its tblout and domtblout but SEARCH in its pfamtblout."""
    return {
        kind: hmmer_footer(
            command,
            query_file,
            targets_file,
            program,
            "SCAN" if program == "hmmscan" and kind != "pfamtblout" else "SEARCH",
        )
        for kind in ("tblout", "domtblout", "pfamtblout")
    }


def _write_domain_table(handle, hits, scan=False):
    """One row per reported domain, sorted by sequence, then position, then model: the order
    of the models in a search, their names in a scan (whose sequences keep input order).
    Names are written as the bytes the inputs hold."""
    rows = []
    for query_index, query_hits in enumerate(hits):
        query = view(text_of(query_hits.query)[0])
        for hit in query_hits.reported:
            name = view(text_of(hit)[0])
            sequence, model, model_length = (query, name, hit.length) if scan else (name, query, query_hits.query.M)
            for domain in hit.domains.reported:
                alignment = domain.alignment
                order = (
                    (query_index, alignment.target_from, model)
                    if scan
                    else (sequence, alignment.target_from, query_index)
                )
                rows.append(
                    (
                        order,
                        (
                            sequence,
                            alignment.target_from,
                            alignment.target_to,
                            domain.env_from,
                            domain.env_to,
                            text_view(_text(alignment.hmm_accession)),
                            model,
                            alignment.hmm_from,
                            alignment.hmm_to,
                            model_length,
                            f"{domain.score:.1f}",
                            f"{domain.i_evalue:.2g}",
                            f"{domain.c_evalue:.2g}",
                            int(domain.included),
                        ),
                    )
                )
    rows.sort(key=lambda row: row[0])
    lines = ["\t".join(DOMAIN_COLUMNS)] + ["\t".join(map(str, row[1])) for row in rows]
    handle.write(("\n".join(lines) + "\n").encode("latin-1"))


def _text(value):
    return value or "-"
