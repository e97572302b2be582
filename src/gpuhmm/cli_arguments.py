"""The command line's arguments: hmmsearch's own option names and defaults, then gpuhmm's engine.

The parsers here read the words; the values of a search's options are checked where the API's
are, when `gpuhmm.options`' settings are built from them.
"""

from __future__ import annotations

import argparse

from ._version import __version__
from .options import BACKENDS, DEFAULT_SHUFFLES, DOMAINDEFS

#: The help of `--qformat` and `--tformat`.
FORMATS_HELP = "fasta, embl, uniprot, genbank, stockholm, afa, clustal, ... (Easel's names) [detected]"


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr and exit status 1, as hmmsearch's, in
    the name of the command it was given to."""

    def error(self, message):
        self.exit(1, f"{self.prog}: error: {message}\n")

    def parse_args(self, args=None, namespace=None):
        parsed, unknown = self.parse_known_args(args, namespace)
        commands = self._subparsers._group_actions[0].choices if self._subparsers else {}
        if commands and getattr(parsed, "command", None) is None:
            self.error(f"a command is needed: {', '.join(commands)} (`{self.prog} COMMAND -h` for its options)")
        if unknown:
            command = commands.get(getattr(parsed, "command", None), self)
            command.error(f"unrecognized arguments: {' '.join(unknown)}")
        return parsed


def _integer(text):
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def _integer_at_least(minimum):
    def parse(text):
        value = _integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def _gigabytes(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return int(value * 1e9)


def _real(text):
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _add_thresholds(group, inclusion):
    """-E, -T, --domE, --domT, --incE, --incT, --incdomE, --incdomT: every one None unless given;
    the help shows the program's default, `inclusion` that of --incE and --incdomE."""
    for flag, name, default, help_text in (
        ("-E", "E", 10.0, "report sequences <= this E-value"),
        ("-T", "T", None, "report sequences >= this score"),
        ("--domE", "domE", 10.0, "report domains <= this E-value"),
        ("--domT", "domT", None, "report domains >= this score"),
        ("--incE", "incE", inclusion, "include sequences <= this E-value"),
        ("--incT", "incT", None, "include sequences >= this score"),
        ("--incdomE", "incdomE", inclusion, "include domains <= this E-value"),
        ("--incdomT", "incdomT", None, "include domains >= this score"),
    ):
        shown = default if default is not None else "unset"
        group.add_argument(flag, dest=name, type=_real, default=None, metavar="X", help=f"{help_text} [{shown}]")


def _add_consts(group, dest, *options):
    """Flags that each set `dest` to a value: (flag, value, help) per option."""
    for flag, value, what in options:
        group.add_argument(flag, dest=dest, action="store_const", const=value, help=what)


def _add_filters(parser, program):
    """--max, --F1, --F2, --F3 and --nobias, as `program` names them."""
    filters = parser.add_argument_group(f"acceleration heuristics (as {program})")
    filters.add_argument("--max", action="store_true", default=None, help="turn all heuristic filters off")
    filters.add_argument("--F1", type=_real, metavar="X", help="MSV filter P-value threshold [0.02]")
    filters.add_argument("--F2", type=_real, metavar="X", help="Viterbi filter P-value threshold [1e-3]")
    filters.add_argument("--F3", type=_real, metavar="X", help="Forward filter P-value threshold [1e-5]")
    filters.add_argument("--nobias", action="store_true", default=None, help="turn off the composition bias filter")


def _add_other(parser, program):
    """--nonull2, -Z, --domZ, --seed and --tformat (hmmscan's --qformat), as `program` names them."""
    other = parser.add_argument_group(f"other (as {program})")
    other.add_argument(
        "--nonull2", action="store_true", default=None, help="turn off biased composition score corrections"
    )
    other.add_argument(
        "-Z", dest="Z", type=_real, metavar="X", help="number of comparisons for E-values [database size]"
    )
    other.add_argument("--domZ", type=_real, metavar="X", help="number of significant sequences for domain E-values")
    other.add_argument("--seed", type=_integer, metavar="N", help="RNG seed, 0 for a random one [42]")
    if program == "hmmscan":
        other.add_argument("--qformat", metavar="FORMAT", help=f"query file format: {FORMATS_HELP}")
    else:
        other.add_argument("--tformat", metavar="FORMAT", help=f"target file format: {FORMATS_HELP}")


def _add_hmmer_options(parser, program):
    """hmmsearch 3.4's own option names and defaults (see `hmmsearch -h`), and `program`'s
    format option."""
    report = parser.add_argument_group("reporting and inclusion thresholds (as hmmsearch)")
    _add_thresholds(report, inclusion=0.01)
    cut = report.add_mutually_exclusive_group()
    for kind, what in (("ga", "gathering"), ("tc", "trusted"), ("nc", "noise")):
        cut.add_argument(
            f"--cut_{kind}",
            dest="cut",
            action="store_const",
            const=kind,
            help=f"use the models' {what} cutoffs ({kind.upper()}) to set all thresholds",
        )
    _add_filters(parser, "hmmsearch")
    # phmmer's --qformat joins its own group, "other (as phmmer)".
    _add_other(parser, "hmmsearch" if program == "phmmer" else program)


def _add_phmmer_options(parser):
    """phmmer 3.4's own option names and defaults (see `phmmer -h`)."""
    scoring = parser.add_argument_group("scoring system (as phmmer)")
    scoring.add_argument("--popen", type=_real, metavar="X", help="gap open probability [0.02]")
    scoring.add_argument("--pextend", type=_real, metavar="X", help="gap extend probability [0.4]")
    matrix = scoring.add_mutually_exclusive_group()
    matrix.add_argument("--mx", metavar="NAME", help="built-in substitution score matrix [BLOSUM62]")
    matrix.add_argument("--mxfile", metavar="FILE", help="substitution score matrix file (not supported)")
    calibration = parser.add_argument_group("E-value calibration (as phmmer)")
    for flag, default, what in (
        ("--EmL", 200, "length of sequences for MSV Gumbel mu fit"),
        ("--EmN", 200, "number of sequences for MSV Gumbel mu fit"),
        ("--EvL", 200, "length of sequences for Viterbi Gumbel mu fit"),
        ("--EvN", 200, "number of sequences for Viterbi Gumbel mu fit"),
        ("--EfL", 100, "length of sequences for Forward exp tail tau fit"),
        ("--EfN", 200, "number of sequences for Forward exp tail tau fit"),
    ):
        calibration.add_argument(flag, type=_integer_at_least(1), metavar="N", help=f"{what} [{default}]")
    calibration.add_argument("--Eft", type=_real, metavar="X", help="tail mass for Forward exp tail tau fit [0.04]")
    other = parser.add_argument_group("other (as phmmer)")
    other.add_argument("--qformat", metavar="FORMAT", help=f"query file format: {FORMATS_HELP}")


def _add_search_arguments(parser, program="hmmsearch"):
    """The outputs, HMMER options and engine settings of `search` and `phmmer` (hmmsearch's
    view) and of `scan` (hmmscan's, one query per sequence: no model shards, summary or shuffles)."""
    searching = program != "hmmscan"
    outputs = parser.add_argument_group("outputs")
    outputs.add_argument("-o", dest="output", metavar="FILE", help=f"{program}'s report [standard output]")
    if searching:
        outputs.add_argument(
            "-A", dest="alignments", metavar="FILE", help="a Stockholm alignment of each query's included hits"
        )
    outputs.add_argument("--tblout", metavar="FILE", help=f"per-sequence hits table, as {program}")
    outputs.add_argument("--domtblout", metavar="FILE", help=f"per-domain hits table, as {program}")
    outputs.add_argument("--pfamtblout", metavar="FILE", help=f"Pfam-style table, as {program}")
    outputs.add_argument("--domains", metavar="FILE", help="per-sequence domain table (TSV, pfam_scan style)")
    outputs.add_argument("--acc", action="store_true", help="prefer accessions over names in the report")
    outputs.add_argument("--noali", action="store_true", help="no alignments in the report")
    width = outputs.add_mutually_exclusive_group()
    width.add_argument("--notextw", action="store_true", help="unlimit the report's line width")
    width.add_argument(
        "--textw",
        type=_integer_at_least(120),
        metavar="N",
        help="the report's line width for alignments [120]",
    )
    if searching:
        outputs.add_argument("--summary", metavar="FILE", help="run summary (JSON)")
        outputs.add_argument("--summary-tsv", metavar="FILE", help="run summary (TSV)")
        outputs.add_argument("--hits", metavar="FILE", help="intermediate hits file for `gpuhmm merge`")
        outputs.add_argument(
            "--shuffle-out",
            metavar="FILE",
            help="per reported hit, an empirical P-value from --shuffle N shuffles of its target (TSV)",
        )
    _add_hmmer_options(parser, program)
    if program == "phmmer":
        _add_phmmer_options(parser)
    _add_engine(parser, program)


def _add_engine(parser, program):
    """The engine settings of `program` (hmmsearch, phmmer, hmmscan or jackhmmer). Each defaults
    to None: EngineSettings' own default, which the help states."""
    engine = parser.add_argument_group("engine")
    engine.add_argument("--cpu", type=_integer, metavar="N", help="worker threads, 0 for one [all cores]")
    engine.add_argument(
        "--backend",
        metavar=f"{{{','.join(BACKENDS)}}}",
        help="filter backend; auto: the GPU where one is usable and the job is large enough [auto]",
    )
    engine.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="a running Dask scheduler, or the scheduler file of `gpuhmm cluster` "
        "[run in this process; a Dask worker per GPU where several are visible]",
    )
    shards = "the worker threads" if program == "jackhmmer" else "1"
    engine.add_argument(
        "--db-shards", type=_integer, metavar="N", help=f"shards to split a FASTA SEQFILE into [{shards}]"
    )
    engine.add_argument(
        "--shard-memory",
        type=_gigabytes,
        metavar="GB",
        help="memory each worker may keep database shards resident in; the least recently used "
        "go first; a larger sequence file streams through a search in this process: on its CPU "
        "threads (also one of 64 MB), or on the GPU in pieces of FASTA [half the GPU's memory; "
        "on the CPU backend, half the host's]",
    )
    if program in ("hmmsearch", "phmmer"):
        engine.add_argument(
            "--model-shards",
            type=_integer,
            metavar="N",
            help="model groups, balanced by length; tasks = model groups × database shards [auto]",
        )
    if program != "hmmscan":
        engine.add_argument(
            "--domaindef",
            metavar=f"{{{','.join(DOMAINDEFS)}}}",
            help="where the GPU backend runs domain definition and the stages after the Forward "
            "filter: the GPU's exact port with the host's cores beside it, or pyhmmer alone [gpu]",
        )
    if program in ("hmmsearch", "phmmer"):
        engine.add_argument(
            "--shuffle",
            type=_integer,
            metavar="N",
            help=f"shuffles per reported hit for --shuffle-out, drawn from --seed [{DEFAULT_SHUFFLES}]",
        )


def build_parser():
    parser = _Parser(prog="gpuhmm", description="hmmsearch-identical profile searches, sharded over Dask (and GPUs).")
    parser.add_argument("--version", action="version", version=f"gpuhmm {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sequences = "sequences (FASTA, EMBL, GenBank, an alignment...; gzip allowed; - for stdin) or a makedb database"

    search = commands.add_parser("search", help="search profile HMMs against a sequence database")
    search.add_argument("hmmfile", metavar="HMMFILE", help="HMMER models (text or binary, gzip allowed)")
    search.add_argument("seqfile", metavar="SEQFILE", help=sequences)
    _add_search_arguments(search)

    phmmer = commands.add_parser("phmmer", help="search protein sequences against a sequence database, as phmmer")
    phmmer.add_argument("queryfile", metavar="QUERYFILE", help="query proteins (any sequence format, plain or gzip)")
    phmmer.add_argument("seqfile", metavar="SEQFILE", help=sequences)
    _add_search_arguments(phmmer, "phmmer")

    scan = commands.add_parser("scan", help="annotate each sequence with the models it matches, as hmmscan")
    scan.add_argument(
        "hmmfile", metavar="HMMFILE", help="HMMER models (text or binary, gzip allowed; no hmmpress needed)"
    )
    scan.add_argument("seqfile", metavar="SEQFILE", help=f"query sequences: {sequences}")
    _add_search_arguments(scan, "hmmscan")

    jackhmmer = commands.add_parser(
        "jackhmmer", help="search protein sequences iteratively against a sequence database, as jackhmmer"
    )
    jackhmmer.add_argument("queryfile", metavar="QUERYFILE", help="query proteins (any sequence format, plain or gzip)")
    jackhmmer.add_argument("seqfile", metavar="SEQFILE", help=sequences)
    _add_jackhmmer_arguments(jackhmmer)

    makedb = commands.add_parser("makedb", help="build a sharded sequence database from a sequence file")
    makedb.add_argument("seqfile", metavar="SEQFILE", help="sequences (FASTA, EMBL, GenBank, an alignment...)")
    makedb.add_argument("outdir", metavar="OUTDIR")
    makedb.add_argument(
        "--shards", type=_integer_at_least(1), default=1, metavar="N", help="shards, balanced by residues [1]"
    )
    alphabet = makedb.add_mutually_exclusive_group()
    alphabet.add_argument("--alphabet", choices=("amino", "dna", "rna"), help="sequence alphabet [guess]")
    alphabet.add_argument("--models", metavar="HMMFILE", help="take the alphabet from these models, as hmmsearch does")
    makedb.add_argument("--tformat", metavar="FORMAT", help=f"SEQFILE's format, as search takes it: {FORMATS_HELP}")

    split = commands.add_parser("splitmodels", help="split an HMM file into shards balanced by model length")
    split.add_argument("hmmfile", metavar="HMMFILE")
    split.add_argument("outdir", metavar="OUTDIR")
    split.add_argument("--shards", type=_integer_at_least(1), default=1, metavar="N", help="model shards [1]")

    warm = commands.add_parser(
        "cluster", help="run a Dask cluster that searches share (--scheduler), until SIGINT or SIGTERM"
    )
    warm.add_argument("--backend", choices=("auto", "cpu", "gpu"), default="auto", help="worker backend [auto]")
    warm.add_argument("--cpu", type=_integer_at_least(1), metavar="N", help="worker threads [all cores]")
    warm.add_argument("--host", default="127.0.0.1", help="address to listen on [127.0.0.1]; any other needs TLS")
    warm.add_argument("--port", type=_integer_at_least(0), default=0, metavar="N", help="scheduler port [any free]")
    warm.add_argument("--scheduler-file", metavar="FILE", help="write the address here, for --scheduler FILE")
    warm.add_argument("--tls-ca-file", metavar="FILE", help="CA certificate (PEM) that signed every party's")
    warm.add_argument("--tls-cert", metavar="FILE", help="this cluster's certificate (PEM)")
    warm.add_argument("--tls-key", metavar="FILE", help="its private key (PEM)")

    merge = commands.add_parser("merge", help="merge `search --hits` files into HMMER tables")
    merge.add_argument("hits", metavar="HITS", nargs="+", help="hits files, one per model shard (`search --hits`)")
    merge.add_argument("--order", metavar="MANIFEST", help="`splitmodels` manifest: restores the models' input order")
    merged = merge.add_argument_group("outputs")
    for flag, what in (
        ("--tblout", "per-sequence hits table, as hmmsearch"),
        ("--domtblout", "per-domain hits table, as hmmsearch"),
        ("--pfamtblout", "Pfam-style table, as hmmsearch"),
        ("--domains", "per-sequence domain table (TSV, pfam_scan style)"),
        ("--summary", "run summary (JSON)"),
        ("--summary-tsv", "run summary (TSV)"),
    ):
        merged.add_argument(flag, metavar="FILE", help=what)
    return parser


def _add_jackhmmer_arguments(parser):
    """jackhmmer 3.4's options with its names and defaults (see `jackhmmer -h`), AlphaFold 3's
    `--seq_limit`, then the engine's. Every option defaults to None: not given."""
    parser.add_argument("-N", dest="max_iterations", type=_integer_at_least(1), metavar="N", help="rounds at most [5]")
    outputs = parser.add_argument_group("outputs")
    outputs.add_argument("-o", dest="output", metavar="FILE", help="jackhmmer's report [standard output]")
    outputs.add_argument("-A", dest="alignments", metavar="FILE", help="each query's last alignment (Stockholm)")
    outputs.add_argument("--tblout", metavar="FILE", help="per-sequence hits table of each query's last round")
    outputs.add_argument("--domtblout", metavar="FILE", help="per-domain hits table of each query's last round")
    outputs.add_argument("--chkhmm", metavar="PREFIX", help="each round's model to PREFIX-<round>.hmm")
    outputs.add_argument("--chkali", metavar="PREFIX", help="each round's alignment to PREFIX-<round>.sto")
    outputs.add_argument("--acc", action="store_true", help="prefer accessions over names in the report")
    outputs.add_argument("--noali", action="store_true", help="no alignments in the report")
    width = outputs.add_mutually_exclusive_group()
    width.add_argument("--notextw", action="store_true", help="unlimit the report's line width")
    width.add_argument("--textw", type=_integer_at_least(120), metavar="N", help="line width [120]")
    outputs.add_argument(
        "--seq_limit",
        type=_integer_at_least(1),
        metavar="N",
        help="keep the first N hits of each round (AlphaFold 3's jackhmmer patch) [all]",
    )
    _add_thresholds(parser.add_argument_group("reporting and inclusion thresholds (as jackhmmer)"), inclusion=0.001)
    _add_filters(parser, "jackhmmer")
    building = parser.add_argument_group("model construction after the first round (as jackhmmer)")
    building.add_argument("--fragthresh", type=_real, metavar="X", help="a fragment if L <= X * alignment length [0.5]")
    weights = building.add_mutually_exclusive_group()
    _add_consts(
        weights,
        "weighting",
        ("--wpb", "pb", "Henikoff position-based weights [default]"),
        ("--wgsc", "gsc", "Gerstein/Sonnhammer/Chothia tree weights"),
        ("--wblosum", "blosum", "Henikoff simple filter weights"),
        ("--wnone", "none", "no relative weighting"),
    )
    building.add_argument("--wid", type=_real, metavar="X", help="for --wblosum: identity cutoff [0.62]")
    effective = building.add_mutually_exclusive_group()
    _add_consts(
        effective,
        "effective",
        ("--eent", "entropy", "effective sequence number by relative entropy target [default]"),
        ("--eentexp", "exp", "... with exponential scaling"),
        ("--eclust", "clust", "effective sequence number: single-linkage clusters"),
        ("--enone", "none", "effective sequence number: the number of sequences"),
    )
    effective.add_argument("--eset", type=_real, metavar="X", help="effective sequence number set to X")
    building.add_argument("--ere", type=_real, metavar="X", help="for --eent: minimum relative entropy per position")
    building.add_argument("--esigma", type=_real, metavar="X", help="for --eent: sigma parameter [45.0]")
    building.add_argument("--eid", type=_real, metavar="X", help="for --eclust: fractional identity cutoff [0.62]")
    prior = building.add_mutually_exclusive_group()
    _add_consts(prior, "prior", ("--pnone", "none", "no prior"), ("--plaplace", "laplace", "a Laplace +1 prior"))
    _add_phmmer_options(parser)
    _add_other(parser, "jackhmmer")
    _add_engine(parser, "jackhmmer")
