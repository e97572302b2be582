"""HMMER 3.4's main human-readable output (`-o`, default stdout) from pyhmmer `TopHits`.

Reproduces, in our own Python, what these HMMER functions print:

* the header block (`report_header`), which may name another program in its first line;
* the per-query framing of those programs' `main` loops: "Query:", "Accession:",
  "Description:", the "//" separator, the `-A` line and the final "[ok]";
* `p7_tophits_Targets()` and `p7_tophits_Domains()` (`src/p7_tophits.c`), search and scan
  mode (the nhmmer long-target layout is not covered);
* `p7_pli_Statistics()` (`src/p7_pipeline.c`) with `esl_stopwatch_Display()` (Easel).

The hits are pyhmmer's, thresholded and sorted (as `Pipeline.search_hmm`, `scan_seq` and
`TopHits.merge` leave them). Counts pyhmmer keeps but does not expose (a hit's expected and
reported domain numbers, a domain's accumulated posterior, the pipeline counters) are read
from its pickled state, which holds HMMER's own serialized `P7_HIT` and `P7_DOMAIN` records.

Where HMMER's own `p7_tophits_Targets` and `p7_tophits_Domains` can be called (`native`), they
write the hit lists, much faster and off the GIL; the restatement writes the same bytes
elsewhere, and the tests hold both to the binaries' reports.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO, TextIO

from pyhmmer.plan7 import TopHits

from ..hits.records import domain_counts, domain_oasc
from ..hits.text import text_of, text_view, view
from ..options import FLUSHED_THRESHOLD, ReportSettings
from . import native
from .alidisplay import included_domains, write_alignment, write_alignments
from .report_header import Program, ReportHeader, write_header

_DOMAIN_TABLE_HEAD = (
    "   #    score  bias  c-Evalue  i-Evalue hmmfrom  hmm to    alifrom  ali to    envfrom  env to     acc\n"
    " ---   ------ ----- --------- --------- ------- -------    ------- -------    ------- -------    ----\n"
)


@dataclass(frozen=True)
class Stopwatch:
    """A query's CPU (user, system) and wall-clock seconds, for "# CPU time" and "# Mc/sec"."""

    user: float = 0.0
    system: float = 0.0
    elapsed: float = 0.0


def write_report(
    handle: TextIO,
    hits: Sequence[TopHits],
    settings: ReportSettings,
    header: ReportHeader,
    queries: Sequence[object] | None = None,
    times: Sequence[Stopwatch] | None = None,
    alignment_file: str | None = None,
    use_native: bool = True,
) -> None:
    """The whole report: header, one section per TopHits (per query, in order), "[ok]".

    `queries`: the query of each TopHits as HMMER names it in "Query:" (an HMM for hmmsearch, a
    sequence for phmmer and hmmscan); by default the TopHits' own. phmmer's caller passes the
    query sequences when the hits come from models built from them, since such a model keeps
    neither accession nor description. `times`: per query; zeros when not given.
    `alignment_file`: the `-A` file, named after each query's "//".

    The target list's name column is as wide as the longest name of every hit kept, reported
    or not, so `hits` must hold the hits hmmsearch keeps (`hits.tophits`).

    `handle` takes text of one character per byte (`hits.text.view`): names and descriptions
    are the bytes HMMER holds, whatever their encoding, and HMMER's widths count bytes. The hit
    lists are HMMER's own writers' (`native`) unless `use_native` is false or they cannot be
    called: then this module's restatement of them writes the same bytes.
    """
    report = Report(header, settings, queries, times, alignment_file)
    handle.write(report.prologue().decode("latin-1"))
    for index, found in enumerate(hits):
        with native.stream(use_native) as out:
            report.write_query(out, index, found, native.located(found) if use_native else None)
        handle.write(bytes(out.value).decode("latin-1"))
    handle.write(report.epilogue().decode("latin-1"))


def write_section(handle: TextIO, found: TopHits, query: object, settings: ReportSettings, state: dict) -> None:
    """A query's target list and domain annotation, each followed by a blank line: what
    `native.write_hit_lists` writes, restated; `state` is `found`'s pickled state."""
    counts = _hit_counts(state)
    names = [tuple(map(view, text_of(hit))) for hit in found]
    namew = max([8] + [len(_shown_name(name, accession, settings.acc)) for name, accession, _ in names])
    _write_targets(handle, found, namew, settings, counts, names)
    handle.write("\n\n")
    _write_domains(handle, found, query, settings, counts, names)
    handle.write("\n\n")


def write_query_lines(handle: TextIO, program: Program, query: object) -> None:
    """A query's "Query:", "Accession:" and "Description:" lines, as `program` prints them."""
    name, accession, description = map(view, text_of(query))
    if program == "hmmsearch":
        handle.write(f"Query:       {name}  [M={query.M}]\n")
    else:  # a sequence, or phmmer's single-sequence model: M is the sequence length
        length = query.M if hasattr(query, "M") else len(query)
        handle.write(f"Query:       {name}  [L={length}]\n")
    if accession:
        handle.write(f"Accession:   {accession}\n")
    if description:
        handle.write(f"Description: {description}\n")


def _hit_counts(state: dict) -> list[tuple[float, int]]:
    """(nexpected, nreported) of each hit in ranked order, from the serialized P7_HITs."""
    return [domain_counts(state["unsrt"][slot]) for slot in state["hit"]]


def _domain_accuracy(domain: object) -> float:
    """The acc column: the expected number of correctly aligned residues (oasc) per envelope residue."""
    return domain_oasc(domain.__getstate__()) / (1.0 + abs(float(domain.env_to - domain.env_from)))


def _shown_name(name: str, accession: str | None, acc: bool) -> str:
    return accession if acc and accession else name


def _write_targets(
    handle: TextIO, found: TopHits, namew: int, settings: ReportSettings, counts: list, names: list
) -> None:
    search = found.mode == "search"
    descw = max(32, settings.textw - namew - 61)
    handle.write(f"Scores for complete sequence{'s' if search else ''} (score includes all domains):\n")
    handle.write("   --- full sequence ---   --- best 1 domain ---    -#dom-\n")
    target = "Sequence" if search else "Model"
    handle.write(f"    E-value  score  bias    E-value  score  bias    exp  N  {target:<{namew}} Description\n")
    handle.write(f"    ------- ------ -----    ------- ------ -----   ---- --  {'--------':<{namew}} -----------\n")
    above_inclusion = True
    for hit, (nexpected, nreported), (name, accession, description) in zip(found, counts, names):
        if not hit.reported:
            continue
        if not hit.included and above_inclusion:
            handle.write("  ------ inclusion threshold ------\n")
            above_inclusion = False
        best = hit.best_domain
        newness = "+" if hit.new else "-" if hit.dropped else " "
        shown = _shown_name(name, accession, settings.acc)
        handle.write(
            f"{newness} {hit.evalue:9.2g} {hit.score:6.1f} {hit.bias:5.1f}  {best.i_evalue:9.2g} {best.score:6.1f} "
            f"{best.bias:5.1f}  {nexpected:5.1f} {nreported:2d}  {shown:<{namew}}  "
            f"{description[:descw] if settings.textw > 0 else description}\n"
        )
    if not len(found.reported):
        handle.write("\n   [No hits detected that satisfy reporting thresholds]\n")


def _write_domains(
    handle: TextIO, found: TopHits, query: object, settings: ReportSettings, counts: list, names: list
) -> None:
    search = found.mode == "search"
    handle.write(
        f"Domain annotation for each {'sequence' if search else 'model'}"
        f"{'' if settings.noali else ' (and alignments)'}:\n"
    )
    query_name, query_accession, _ = map(view, text_of(query))
    for hit, (_, nreported), (name, accession, description) in zip(found, counts, names):
        if not hit.reported:
            continue
        shown = _shown_name(name, accession, settings.acc)
        if settings.textw > 0:
            description = description[: max(32, settings.textw - len(shown) - 5)]
        handle.write(f">> {shown}  {description}\n")
        if nreported == 0:
            handle.write(
                "   [No individual domains that satisfy reporting thresholds (although complete target did)]\n\n"
            )
            continue
        handle.write(_DOMAIN_TABLE_HEAD)
        reported = [domain for domain in hit.domains if domain.reported]
        for number, domain in enumerate(reported, 1):
            ali = domain.alignment
            handle.write(
                f" {number:3d} {'!' if domain.included else '?'} {domain.score:6.1f} {domain.bias:5.1f} "
                f"{domain.c_evalue:9.2g} {domain.i_evalue:9.2g} "
                f"{_span(ali.hmm_from, ali.hmm_to, ali.hmm_length)} "
                f"{_span(ali.target_from, ali.target_to, ali.target_length)} "
                f"{_span(domain.env_from, domain.env_to, ali.target_length)} {_domain_accuracy(domain):4.2f}\n"
            )
        if settings.noali:
            handle.write("\n")
            continue
        handle.write("\n  Alignments for each domain:\n")
        for number, domain in enumerate(reported, 1):
            ali = domain.alignment
            handle.write(
                f"  == domain {number}  score: {domain.score:.1f} bits;  conditional E-value: {domain.c_evalue:.2g}\n"
            )
            # the model is the query in a search, the target in a scan; --acc shows accessions
            model, sequence = (query_name, query_accession), (name, accession)
            if not search:
                model, sequence = sequence, model
            write_alignment(
                handle,
                ali,
                _shown_name(*model, settings.acc),
                _shown_name(*sequence, settings.acc),
                settings.textw,
            )
            handle.write("\n")
    if not len(found.reported):
        handle.write("\n   [No targets detected that satisfy reporting thresholds]\n")


def _span(start: int, end: int, length: int) -> str:
    """Coordinates with HMMER's end marks: "[" at position 1, "]" at the last, "." elsewhere."""
    return f"{start:7d} {end:7d} {'[' if start == 1 else '.'}{']' if end == length else '.'}"


def _clock(seconds: float) -> str:
    """hh:mm:ss.xx, truncated field by field as Easel's format_time_string does."""
    h = int(seconds / 3600.0)
    m = int(seconds / 60.0) - h * 60
    s = int(seconds) - h * 3600 - m * 60
    hundredths = int(seconds * 100.0) - h * 360000 - m * 6000 - s * 100
    return f"{h:02d}:{m:02d}:{s:02d}.{hundredths:02d}"


def write_statistics(handle: TextIO, mode: str, pli: dict, watch: Stopwatch) -> None:
    handle.write("Internal pipeline statistics summary:\n-------------------------------------\n")
    models = f"{pli['nmodels']:15d}  ({pli['nnodes']} nodes)\n"
    sequences = f"{pli['nseqs']:15d}  ({pli['nres']} residues searched)\n"
    if mode == "search":
        handle.write("Query model(s):              " + models + "Target sequences:            " + sequences)
        targets = pli["nseqs"]
    else:
        handle.write("Query sequence(s):           " + sequences + "Target model(s):             " + models)
        targets = pli["nmodels"]
    for label, passed, fraction in (
        ("MSV", "n_past_msv", "F1"),
        ("bias", "n_past_bias", "F1"),
        ("Vit", "n_past_vit", "F2"),
        ("Fwd", "n_past_fwd", "F3"),
    ):
        share = pli[passed] / targets if targets else float("nan")
        threshold = 0.0 if pli[fraction] == FLUSHED_THRESHOLD else pli[fraction]  # HMMER's, flushed to zero
        handle.write(
            f"{'Passed ' + label + ' filter:':<29}{pli[passed]:15d}  ({share:.6g}); "
            f"expected {threshold * targets:.1f} ({threshold:.6g})\n"
        )
    by_option = 1  # p7_ZSETBY_OPTION
    z_source = "[as set by --Z on cmdline]" if pli["Z_setby"] == by_option else "[actual number of targets]"
    handle.write(f"Initial search space (Z):    {pli['Z']:15.0f}  {z_source}\n")
    if pli["domZ_setby"] == by_option:
        domz_source = "[as set by --domZ on cmdline]"
    else:
        domz_source = "[number of targets reported over threshold]"
    handle.write(f"Domain search space  (domZ): {pli['domZ']:15.0f}  {domz_source}\n")
    handle.write(
        f"# CPU time: {watch.user:.2f}u {watch.system:.2f}s {_clock(watch.user + watch.system)} "
        f"Elapsed: {_clock(watch.elapsed)}\n"
    )
    rate = pli["nres"] * pli["nnodes"] / (watch.elapsed * 1.0e6) if watch.elapsed > 0 else 0.0
    handle.write(f"# Mc/sec: {rate:.2f}\n")


@dataclass(frozen=True)
class Report:
    """What a search's `-o` report and `-A` alignments need beside its hits; as a
    `parallel.PerQuery` writer, the report."""

    header: ReportHeader
    settings: ReportSettings
    queries: Sequence[object] | None = None  # see `write_report`
    times: Sequence[Stopwatch] | None = None
    alignment_file: str | None = None

    def prologue(self) -> bytes:
        text = io.StringIO()
        write_header(text, self.header)
        return text_view(text.getvalue()).encode("latin-1")

    def write_query(self, out, index: int, found: TopHits, place) -> None:
        """Query `index`'s section, from "Query:" to its "//" (and the `-A` line), to `out`, a
        `native.stream`; HMMER's writers write the hit lists where `place` (`native.located`)
        is given."""
        query = found.query if self.queries is None else self.queries[index]
        settings, text = self.settings, io.StringIO()
        write_query_lines(text, self.header.program, query)
        if place is None:
            state = found.__getstate__()
            # The alignments name the model, as HMMER's do: phmmer's keeps no accession.
            write_section(text, found, found.query, settings, state)
            pipeline = state["pipeline"]
        else:
            out.write(text.getvalue().encode("latin-1"))
            text = io.StringIO()
            native.write_hit_lists(out, place, settings.textw, settings.acc, not settings.noali)
            pipeline = place[1]
        watch = Stopwatch() if self.times is None else self.times[index]
        write_statistics(text, found.mode, pipeline, watch)
        text.write("//\n")
        if self.alignment_file is not None and self.header.program != "hmmscan":
            aligned = included_domains(found)
            if aligned:
                text.write(
                    f"# Alignment of {aligned} hits satisfying inclusion thresholds saved to: "
                    f"{text_view(str(self.alignment_file))}\n"
                )
            else:
                text.write("# No hits satisfy inclusion thresholds; no alignment saved\n")
        out.write(text.getvalue().encode("latin-1"))

    def epilogue(self) -> bytes:
        return b"[ok]\n"

    def write_alignments(self, handle: BinaryIO, hits: Sequence[TopHits]) -> None:
        write_alignments(handle, hits, self.header.program, self.settings.textw, self.queries)
