"""The header block of HMMER 3.4's reports: `p7_banner()` (`src/hmmer.c`) and the
`output_header()` of `src/hmmsearch.c`, `src/phmmer.c`, `src/hmmscan.c` and `src/jackhmmer.c`,
which print one line for each option the user set, in each program's own order and words.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from ..options import (
    DEFAULT_SEARCH,
    EngineSettings,
    JackhmmerOptions,
    OutputFiles,
    PhmmerOptions,
    ReportSettings,
    SearchOptions,
    SequenceFormats,
)

HMMER_VERSION = "3.4"

Program = Literal["hmmsearch", "phmmer", "hmmscan", "jackhmmer"]

#: Per program: its banner, the labels of its query and target files, its letter in _OPTION_LINES.
PROGRAMS = {
    "hmmsearch": ("search profile(s) against a sequence database", "query HMM file:", "target sequence database:", "s"),
    "phmmer": (
        "search a protein sequence against a protein database",
        "query sequence file:",
        "target sequence database:",
        "p",
    ),
    "hmmscan": ("search sequence(s) against a profile database", "query sequence file:", "target HMM database:", "c"),
}


RULE = "# - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -\n"


#: output_header()'s option lines, in its order: (flag, programs that print it, text after "# ").
#: Programs: s = hmmsearch, p = phmmer, c = hmmscan. A text with a % takes the option's value.
_OPTION_LINES = (
    ("-o", "spc", "output directed to file:         %s"),
    ("-A", "s", "MSA of all hits saved to file:   %s"),
    ("-A", "p", "MSA of hits saved to file:       %s"),
    ("--tblout", "spc", "per-seq hits tabular output:     %s"),
    ("--domtblout", "spc", "per-dom hits tabular output:     %s"),
    ("--pfamtblout", "spc", "pfam-style tabular hit output:   %s"),
    ("--acc", "spc", "prefer accessions over names:    yes"),
    ("--noali", "spc", "show alignments in output:       no"),
    ("--notextw", "spc", "max ASCII text line length:      unlimited"),
    ("--textw", "spc", "max ASCII text line length:      %d"),
    ("--popen", "p", "gap open probability:            %f"),
    ("--pextend", "p", "gap extend probability:          %f"),
    ("--mx", "p", "subst score matrix (built-in):   %s"),
    ("--mxfile", "p", "subst score matrix (file):       %s"),
    ("-E", "sp", "sequence reporting threshold:    E-value <= %g"),
    ("-E", "c", "profile reporting threshold:     E-value <= %g"),
    ("-T", "sp", "sequence reporting threshold:    score >= %g"),
    ("-T", "c", "profile reporting threshold:     score >= %g"),
    ("--domE", "spc", "domain reporting threshold:      E-value <= %g"),
    ("--domT", "spc", "domain reporting threshold:      score >= %g"),
    ("--incE", "sp", "sequence inclusion threshold:    E-value <= %g"),
    ("--incE", "c", "profile inclusion threshold:     E-value <= %g"),
    ("--incT", "sp", "sequence inclusion threshold:    score >= %g"),
    ("--incT", "c", "profile inclusion threshold:     score >= %g"),
    ("--incdomE", "spc", "domain inclusion threshold:      E-value <= %g"),
    ("--incdomT", "spc", "domain inclusion threshold:      score >= %g"),
    ("--cut_ga", "sc", "model-specific thresholding:     GA cutoffs"),
    ("--cut_nc", "sc", "model-specific thresholding:     NC cutoffs"),
    ("--cut_tc", "sc", "model-specific thresholding:     TC cutoffs"),
    ("--max", "spc", "Max sensitivity mode:            on [all heuristic filters off]"),
    ("--F1", "spc", "MSV filter P threshold:       <= %g"),
    ("--F2", "spc", "Vit filter P threshold:       <= %g"),
    ("--F3", "spc", "Fwd filter P threshold:       <= %g"),
    ("--nobias", "spc", "biased composition HMM filter:   off"),
    ("--restrictdb_stkey", "sp", "Restrict db to start at seq key: %s"),
    ("--restrictdb_n", "sp", "Restrict db to # target seqs:    %d"),
    ("--ssifile", "sp", "Override ssi file to:            %s"),
    ("--nonull2", "spc", "null2 bias corrections:          off"),
    ("--EmL", "p", "seq length, MSV Gumbel mu fit:   %d"),
    ("--EmN", "p", "seq number, MSV Gumbel mu fit:   %d"),
    ("--EvL", "p", "seq length, Vit Gumbel mu fit:   %d"),
    ("--EvN", "p", "seq number, Vit Gumbel mu fit:   %d"),
    ("--EfL", "p", "seq length, Fwd exp tau fit:     %d"),
    ("--EfN", "p", "seq number, Fwd exp tau fit:     %d"),
    ("--Eft", "p", "tail mass for Fwd exp tau fit:   %f"),
    ("-Z", "spc", "sequence search space set to:    %.0f"),
    ("--domZ", "spc", "domain search space set to:      %.0f"),
    ("--seed", "spc", "random number seed set to:       %d"),
    ("--qformat", "p", "query <seqfile> format asserted: %s"),
    ("--qformat", "c", "input seqfile format asserted:   %s"),
    ("--tformat", "s", "targ <seqfile> format asserted:  %s"),
    ("--tformat", "p", "target <seqdb> format asserted:  %s"),
    ("--cpu", "sp", "number of worker threads:        %d"),
    ("--cpu", "c", "multithread parallelization:     %d workers"),
)


#: The lines that replace a line above when its option's value is 0. For `--seed 0` HMMER 3.4
#: prints "set to: 0" after "one-time arbitrary": its output_header() falls through to it.
_WHEN_ZERO = {
    "random number seed set to:       %d": (
        "random number seed:              one-time arbitrary",
        "random number seed set to:       0",
    ),
    "multithread parallelization:     %d workers": ("multithread parallelization:     off",),
}


@dataclass(frozen=True)
class ReportHeader:
    """The header block: which HMMER program's report this is, its input files and the options
    used, as (flag, value) pairs, e.g. (("--tblout", "hits.tbl"), ("-E", 0.01), ("--acc", None)).
    `shown_as` names the program in the banner line (default: `program`)."""

    program: Program
    query_file: str
    target_file: str
    options: tuple[tuple[str, object], ...] = ()
    shown_as: str | None = None


def write_banner(handle: TextIO, shown_as: str, banner: str) -> None:
    """`p7_banner()`: the program and what it does, HMMER's version and licence, a rule."""
    handle.write(f"# {shown_as} :: {banner}\n")
    handle.write(f"# HMMER {HMMER_VERSION} (Aug 2023); http://hmmer.org/\n")
    handle.write("# Copyright (C) 2023 Howard Hughes Medical Institute.\n")
    handle.write("# Freely distributed under the BSD open source license.\n")
    handle.write(RULE)


def write_header(handle: TextIO, header: ReportHeader) -> None:
    banner, query_label, target_label, letter = PROGRAMS[header.program]
    write_banner(handle, header.shown_as or header.program, banner)
    handle.write(f"# {query_label:<33}{header.query_file}\n# {target_label:<33}{header.target_file}\n")
    used = dict(header.options)
    lines = [(flag, text) for flag, programs, text in _OPTION_LINES if letter in programs]
    unknown = set(used) - {flag for flag, _ in lines}
    if unknown:
        raise ValueError(f"{header.program} prints no header line for {sorted(unknown)}")
    for flag, text in lines:
        if flag in used:
            handle.writelines(f"# {line}\n" for line in option_lines(text, used[flag]))
    handle.write(RULE + "\n")


def option_lines(text: str, value: object) -> tuple[str, ...]:
    """An option's line with its value, converted as HMMER's getopts would read it (or the
    lines that replace it when the value is 0)."""
    if "%" not in text:
        return (text,)
    if "%s" in text:
        return (text % value,)
    number = int(value) if "%d" in text else float(value)
    return _WHEN_ZERO[text] if number == 0 and text in _WHEN_ZERO else (text % number,)


def header_options(
    program: Program,
    options: SearchOptions,
    outputs: OutputFiles,
    phmmer: PhmmerOptions | None = None,
    formats: SequenceFormats = SequenceFormats(),
) -> tuple[tuple[str, object], ...]:
    """The (flag, value) pairs of the options a search was given that `program` prints a line
    for: its outputs (the report's own file unless it is standard output), every HMMER option
    (phmmer's own among them) that differs from its default, and the formats asserted."""
    used = [
        (flag, getattr(outputs, name))
        for name, flag in (
            ("output", "-o"),
            ("alignments", "-A"),
            ("tblout", "--tblout"),
            ("domtblout", "--domtblout"),
            ("pfamtblout", "--pfamtblout"),
        )
    ]
    used = [(flag, value) for flag, value in used if value and value != "-"]
    used += _report_flags(outputs.report)
    for given in (options, phmmer or PhmmerOptions()):
        for field in dataclasses.fields(given):
            value = getattr(given, field.name)
            if value == field.default:
                continue
            flag = f"-{field.name}" if len(field.name) == 1 else f"--{field.name}"
            if field.name == "cut":
                used.append((f"--cut_{value}", None))
            else:
                used.append((flag, None if isinstance(value, bool) else value))
    used += _format_flags(formats)
    letter = PROGRAMS[program][3]
    printed = {flag for flag, programs, _ in _OPTION_LINES if letter in programs}
    return tuple((flag, value) for flag, value in used if flag in printed)


#: How `jackhmmer_header_options` names the settings that differ from jackhmmer's defaults.
_WEIGHTING_FLAGS = {"gsc": "--wgsc", "blosum": "--wblosum", "none": "--wnone"}
_EFFECTIVE_FLAGS = {"clust": "--eclust", "none": "--enone"}
_PRIOR_FLAGS = {"laplace": "--plaplace", "none": "--pnone"}


def jackhmmer_header_options(
    search: SearchOptions,
    settings: JackhmmerOptions,
    first_round: PhmmerOptions,
    outputs: OutputFiles,
    engine: EngineSettings,
    formats: SequenceFormats,
) -> tuple[tuple[str, Any], ...]:
    """The (flag, value) pairs jackhmmer's report header prints a line for (value None for a
    switch): the outputs (the report's own file unless standard output), the `-N`, search,
    model construction and first-round settings that differ from jackhmmer's defaults, the
    formats asserted (`SequenceFormats`), and `--cpu` where given."""
    used: list[tuple[str, Any]] = [("-N", settings.max_iterations)] if settings.max_iterations != 5 else []
    for flag, path in (
        ("-o", outputs.output),
        ("-A", outputs.alignments),
        ("--tblout", outputs.tblout),
        ("--domtblout", outputs.domtblout),
        ("--chkhmm", settings.chkhmm),
        ("--chkali", settings.chkali),
    ):
        if path is not None and path != "-":
            used.append((flag, path))
    used += _report_flags(outputs.report)
    if settings.seq_limit is not None:
        used.append(("--seq_limit", settings.seq_limit))
    for given, defaults in ((first_round, PhmmerOptions()), (search, DEFAULT_SEARCH)):
        for field in dataclasses.fields(given):
            value = getattr(given, field.name)
            if value != getattr(defaults, field.name):
                flag = f"-{field.name}" if len(field.name) == 1 else f"--{field.name}"
                used.append((flag, None if isinstance(value, bool) else value))
    jackhmmer_defaults = JackhmmerOptions()
    for name in ("fragthresh", "wid", "ere", "esigma", "eid"):
        if getattr(settings, name) != getattr(jackhmmer_defaults, name):
            used.append((f"--{name}", getattr(settings, name)))
    for flags, value in (
        (_WEIGHTING_FLAGS, settings.weighting),
        (_EFFECTIVE_FLAGS, settings.effective),
        (_PRIOR_FLAGS, settings.prior),
    ):
        if value in flags:
            used.append((flags[value], None))
    if settings.eset is not None:
        used.append(("--eset", settings.eset))
    used += _format_flags(formats)
    if engine.cpus is not None:
        used.append(("--cpu", engine.cpus))
    return tuple(used)


def _report_flags(report: ReportSettings) -> list[tuple[str, Any]]:
    """The report settings that differ from HMMER's defaults, as header (flag, value) pairs."""
    used: list[tuple[str, Any]] = [
        (flag, None) for flag, on in (("--acc", report.acc), ("--noali", report.noali)) if on
    ]
    if report.textw != 120:
        used.append(("--notextw", None) if report.textw == 0 else ("--textw", report.textw))
    return used


def _format_flags(formats: SequenceFormats) -> list[tuple[str, Any]]:
    """The formats asserted, as header (flag, value) pairs."""
    return [(f"--{name}", getattr(formats, name)) for name in ("qformat", "tformat") if getattr(formats, name)]
