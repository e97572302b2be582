"""jackhmmer 3.4's outputs: its `-o` report, `-A` alignment, tables and checkpoint files.

Reproduces, in our own Python, what `src/jackhmmer.c` prints around HMMER's own listings
(which `report` restates): the header block (`output_header`, jackhmmer's options in its
order and words, AlphaFold 3's `--seq_limit` line where its patch puts it), each query's
"Query:" lines, each round's "@@" lines (the round's alignment and model before it, its new
targets, the growth of its alignment and convergence after it), the `-A` line and "//".

The tables hold each query's last round (its sequence names the query), with the column
header only before the query file's first sequence (jackhmmer's `nquery == 1`). The `-A` file
holds each query's last alignment; checkpoint file i holds round i of every query that ran it,
its model (`--chkhmm`, HMMER's text form) or alignment (`--chkali`, Pfam format).

Rounds and queries are read by their attributes (`iterative.Round`, `iterative.Query`).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

from ..hits.text import text_view
from ..hits.tophits import attached
from ..hits.underflow import as_printed
from ..options import ReportSettings
from . import parallel, tables
from .files import written_together
from .report import Stopwatch, write_query_lines, write_section, write_statistics
from .report_header import RULE, option_lines, write_banner

BANNER = "iteratively search a protein sequence against a protein database"

#: output_header()'s lines in jackhmmer's order: (flag, text after "# "); a % takes the value.
OPTION_LINES = (
    ("-N", "maximum iterations set to:       %d"),
    ("-o", "output directed to file:         %s"),
    ("-A", "MSA of hits saved to file:       %s"),
    ("--tblout", "per-seq hits tabular output:     %s"),
    ("--domtblout", "per-dom hits tabular output:     %s"),
    ("--chkhmm", "HMM checkpoint files output:     %s-<i>.hmm"),
    ("--chkali", "MSA checkpoint files output:     %s-<i>.sto"),
    ("--acc", "prefer accessions over names:    yes"),
    ("--noali", "show alignments in output:       no"),
    ("--notextw", "max ASCII text line length:      unlimited"),
    ("--textw", "max ASCII text line length:      %d"),
    ("--seq_limit", "set max sequence hits to return: %d"),
    ("--popen", "gap open probability:            %f"),
    ("--pextend", "gap extend probability:          %f"),
    ("--mx", "subst score matrix (built-in):   %s"),
    ("-E", "sequence reporting threshold:    E-value <= %g"),
    ("-T", "sequence reporting threshold:    score <= %g"),
    ("--domE", "domain reporting threshold:      E-value <= %g"),
    ("--domT", "domain reporting threshold:      score <= %g"),
    ("--incE", "sequence inclusion threshold:    E-value <= %g"),
    ("--incT", "sequence inclusion threshold:    score >= %g"),
    ("--incdomE", "domain inclusion threshold:      E-value <= %g"),
    ("--incdomT", "domain inclusion threshold:      score >= %g"),
    ("--max", "Max sensitivity mode:            on [all heuristic filters off]"),
    ("--F1", "MSV filter P threshold:       <= %g"),
    ("--F2", "Vit filter P threshold:       <= %g"),
    ("--F3", "Fwd filter P threshold:       <= %g"),
    ("--nobias", "biased composition HMM filter:   off"),
    ("--fragthresh", "define fragments if <= x*alen:   %.3f"),
    ("--wpb", "relative weighting scheme:       Henikoff PB"),
    ("--wgsc", "relative weighting scheme:       G/S/C"),
    ("--wblosum", "relative weighting scheme:       BLOSUM filter"),
    ("--wnone", "relative weighting scheme:       none"),
    ("--wid", "frac id cutoff for BLOSUM wgts:  %f"),
    ("--eent", "effective seq number scheme:     entropy weighting"),
    ("--eclust", "effective seq number scheme:     single linkage clusters"),
    ("--enone", "effective seq number scheme:     none"),
    ("--eset", "effective seq number:            set to %f"),
    ("--ere", "minimum rel entropy target:      %f bits"),
    ("--esigma", "entropy target sigma parameter:  %f bits"),
    ("--eid", "frac id cutoff for --eclust:     %f"),
    ("--pnone", "prior scheme:                    none"),
    ("--plaplace", "prior scheme:                    Laplace +1"),
    ("--EmL", "seq length, MSV Gumbel mu fit:   %d"),
    ("--EmN", "seq number, MSV Gumbel mu fit:   %d"),
    ("--EvL", "seq length, Vit Gumbel mu fit:   %d"),
    ("--EvN", "seq number, Vit Gumbel mu fit:   %d"),
    ("--EfL", "seq length, Fwd exp tau fit:     %d"),
    ("--EfN", "seq number, Fwd exp tau fit:     %d"),
    ("--Eft", "tail mass for Fwd exp tau fit:   %f"),
    ("--nonull2", "null2 bias corrections:          off"),
    ("-Z", "sequence search space set to:    %.0f"),
    ("--domZ", "domain search space set to:      %.0f"),
    ("--seed", "random number seed set to:       %d"),
    ("--qformat", "query <seqfile> format asserted: %s"),
    ("--tformat", "target <seqdb> format asserted:  %s"),
    ("--cpu", "number of worker threads:        %d"),
)


@dataclass(frozen=True)
class JackhmmerReport:
    """What the outputs need beside the queries and their rounds: the header's files and
    option lines ((flag, value) pairs, value None for a switch), the report's look, the `-A`
    file as the user named it, the round limit, and the command line the tables' footer names."""

    query_file: str
    target_file: str
    options: tuple = ()
    settings: ReportSettings = ReportSettings()
    alignment_file: str | None = None
    max_iterations: int = 5
    command: str = "gpuhmm jackhmmer"
    shown_as: str = "gpuhmm"


def write_outputs(queries, paths, checkpoints, report):
    """Write for `queries` (in file order, each with its rounds) what `paths` names
    ("output", "alignments", "tblout", "domtblout": a path or None) and the checkpoint file
    of each round run (`checkpoints`: path → ("hmm" | "sto", round)), all together
    (`files.written_together`). What goes to /dev/null is not formatted."""
    writers = {
        "output": lambda handle: _write_report(handle, queries, report),
        "alignments": lambda handle: _write_alignments(handle, queries, report.settings.textw),
    }
    formats = {"tblout": "targets", "domtblout": "domains"}
    wanted = [(path, kind) for kind, path in paths.items() if path is not None]
    rounds = max((len(query.rounds) for query in queries), default=0)
    for path, (kind, number) in checkpoints.items():
        if number <= rounds:  # jackhmmer opens a round's checkpoint file as the round ends
            writers[path] = lambda handle, kind=kind, number=number: _write_checkpoint(handle, queries, kind, number)
            wanted.append((path, path))
    wanted = [(path, kind) for path, kind in wanted if path != os.devnull]
    with written_together([path for path, _ in wanted]) as handles:
        opened = {kind: handle for handle, (_, kind) in zip(handles, wanted)}
        table_outputs = [(opened[kind], format) for kind, format in formats.items() if kind in opened]
        if table_outputs:
            _write_tables(table_outputs, queries, report)
        for kind, handle in opened.items():
            if kind in writers:
                writers[kind](handle)


def _write_tables(outputs, queries, report):
    """p7_tophits_TabularTargets/Domains of each query's last round, named by its sequence,
    for each (handle, format) of `outputs`: the column header only before the query file's
    first sequence."""
    footer = tuple(tables.hmmer_footer(report.command, report.query_file, report.target_file, "jackhmmer"))
    header = bool(queries) and queries[0].position == 0
    last = [attached(as_printed(query.rounds[-1].hits).__getstate__(), query.sequence) for query in queries]
    parallel.write_per_query([(handle, tables.Table(format, footer, header)) for handle, format in outputs], last)


def _write_report(binary, queries, report):
    handle = io.TextIOWrapper(binary, encoding="latin-1", newline="\n")
    _write_header(handle, report)
    settings = report.settings
    for query in queries:
        write_query_lines(handle, "jackhmmer", query.sequence)
        handle.write("\n")
        for done in query.rounds:
            _write_round(handle, done, settings, report.max_iterations)
        if report.alignment_file is not None:
            aligned = len(query.rounds[-1].msa.sequences)
            handle.write(
                f"# Alignment of {aligned} hits satisfying inclusion thresholds saved to: "
                f"{text_view(str(report.alignment_file))}\n"
            )
        handle.write("//\n")
    handle.write("[ok]\n")
    handle.flush()
    handle.detach()


def _write_round(handle, done, settings, max_iterations):
    """One round as jackhmmer's loop prints it: p7_tophits_Targets, p7_tophits_Domains and
    p7_pli_Statistics between its "@@" lines (`report.write_section`)."""
    if done.number > 1:
        sequences = done.previous_sequences
        handle.write(
            f"@@\n@@ Round:                  {done.number}\n"
            f"@@ Included in MSA:        {sequences} subsequences "
            f"(query + {sequences - 1} subseqs from {done.previous_targets} targets)\n"
            f"@@ Model size:             {done.hmm.M} positions\n@@\n\n"
        )
    found = as_printed(done.hits)
    state = found.__getstate__()
    write_section(handle, found, done.hmm, settings, state)
    write_statistics(handle, found.mode, state["pipeline"], Stopwatch(*done.watch))
    handle.write(
        f"\n@@ New targets included:   {done.new_targets}\n"
        f"@@ New alignment includes: {len(done.msa.sequences)} subseqs (was {done.previous_sequences}), "
        "including original query\n"
    )
    if done.converged:
        handle.write(f"@@\n@@ CONVERGED (in {done.number} rounds). \n@@\n\n")
    elif done.number < max_iterations:
        handle.write("@@ Continuing to next round.\n\n")


def _write_header(handle, report):
    write_banner(handle, report.shown_as, BANNER)
    handle.write(f"# query sequence file:             {text_view(str(report.query_file))}\n")
    handle.write(f"# target sequence database:        {text_view(str(report.target_file))}\n")
    used = dict(report.options)
    for flag, text in OPTION_LINES:
        if flag in used:
            handle.writelines(f"# {text_view(line)}\n" for line in option_lines(text, used[flag]))
    handle.write(RULE + "\n")


def _write_alignments(handle, queries, textw):
    """`-A`: each query's last alignment, Stockholm (Pfam format under `--notextw`)."""
    for query in queries:
        query.rounds[-1].msa.write(handle, "stockholm" if textw > 0 else "pfam")


def _write_checkpoint(handle, queries, kind, number):
    """Checkpoint file `number` of `kind`: round `number` of each query that ran it."""
    for query in queries:
        if len(query.rounds) >= number:
            done = query.rounds[number - 1]
            if kind == "hmm":
                done.hmm.write(handle, binary=False)
            else:
                done.msa.write(handle, "pfam")
