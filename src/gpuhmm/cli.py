"""`gpuhmm makedb | splitmodels | search | merge`: hmmsearch's options, one-line errors."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
from pathlib import Path

from ._version import __version__
from .errors import GpuhmmError
from .options import DEFAULT_SHUFFLES, SearchOptions

log = logging.getLogger("gpuhmm")


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option is one line on stderr (exit 2), with no usage dump."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _integer_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


_positive_int = _integer_at_least(1)


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


def _add_hmmer_options(parser):
    """hmmsearch 3.4's own option names and defaults (see `hmmsearch -h`)."""
    report = parser.add_argument_group("reporting and inclusion thresholds (as hmmsearch)")
    for flag, name, default, help_text in (
        ("-E", "E", 10.0, "report sequences <= this E-value"),
        ("-T", "T", None, "report sequences >= this score"),
        ("--domE", "domE", 10.0, "report domains <= this E-value"),
        ("--domT", "domT", None, "report domains >= this score"),
        ("--incE", "incE", 0.01, "include sequences <= this E-value"),
        ("--incT", "incT", None, "include sequences >= this score"),
        ("--incdomE", "incdomE", 0.01, "include domains <= this E-value"),
        ("--incdomT", "incdomT", None, "include domains >= this score"),
    ):
        report.add_argument(flag, dest=name, type=_real, default=None, metavar="X",
                            help=f"{help_text} [{default if default is not None else 'unset'}]")
    cut = report.add_mutually_exclusive_group()
    for kind, what in (("ga", "gathering"), ("tc", "trusted"), ("nc", "noise")):
        cut.add_argument(f"--cut_{kind}", dest="cut", action="store_const", const=kind,
                         help=f"use the models' {what} cutoffs ({kind.upper()}) to set all thresholds")
    filters = parser.add_argument_group("acceleration heuristics (as hmmsearch)")
    filters.add_argument("--max", action="store_true", default=None, help="turn all heuristic filters off")
    filters.add_argument("--F1", type=_real, metavar="X", help="MSV filter P-value threshold [0.02]")
    filters.add_argument("--F2", type=_real, metavar="X", help="Viterbi filter P-value threshold [1e-3]")
    filters.add_argument("--F3", type=_real, metavar="X", help="Forward filter P-value threshold [1e-5]")
    filters.add_argument("--nobias", action="store_true", default=None, help="turn off the composition bias filter")
    other = parser.add_argument_group("other (as hmmsearch)")
    other.add_argument("-Z", dest="Z", type=_real, metavar="X", help="number of comparisons for E-values [database size]")
    other.add_argument("--domZ", type=_real, metavar="X", help="number of significant sequences for domain E-values")
    other.add_argument("--seed", type=_integer_at_least(0), metavar="N", help="RNG seed, 0 for a random one [42]")


def _add_search_arguments(parser, program="hmmsearch"):
    """The outputs, HMMER options and engine settings of `search` and `phmmer` (hmmsearch's
    view) and of `scan` (hmmscan's, one query per sequence: no model shards, summary or shuffles)."""
    searching = program != "hmmscan"
    outputs = parser.add_argument_group("outputs")
    outputs.add_argument("--tblout", metavar="FILE", help=f"per-sequence hits table, as {program}")
    outputs.add_argument("--domtblout", metavar="FILE", help=f"per-domain hits table, as {program}")
    outputs.add_argument("--pfamtblout", metavar="FILE", help=f"Pfam-style table, as {program}")
    outputs.add_argument("--domains", metavar="FILE", help="per-sequence domain table (TSV, pfam_scan style)")
    if searching:
        outputs.add_argument("--summary", metavar="FILE", help="run summary (JSON)")
        outputs.add_argument("--summary-tsv", metavar="FILE", help="run summary (TSV)")
        outputs.add_argument("--hits", metavar="FILE", help="intermediate hits file for `gpuhmm merge`")
        outputs.add_argument("--shuffle-out", metavar="FILE",
                             help="per reported hit, an empirical P-value from --shuffle N shuffles of its target (TSV)")
    _add_hmmer_options(parser)
    engine = parser.add_argument_group("engine")
    engine.add_argument("--cpu", type=_positive_int, metavar="N", help="worker threads [all cores]")
    engine.add_argument("--backend", choices=("auto", "cpu", "gpu"), default="auto", help="filter backend [auto]")
    engine.add_argument("--scheduler", metavar="ADDRESS", help="existing Dask scheduler [start a LocalCluster]")
    engine.add_argument("--db-shards", type=_positive_int, default=1, metavar="N",
                        help="shards to split a FASTA SEQFILE into [1]")
    engine.add_argument("--shard-memory", type=_gigabytes, metavar="GB",
                        help="memory each worker may keep database shards resident in; the least recently used "
                             "go first [half the GPU's memory; on the CPU backend, half the host's]")
    if searching:
        engine.add_argument("--model-shards", type=_positive_int, metavar="N",
                            help="model groups, balanced by length; tasks = model groups × database shards [auto]")
        engine.add_argument("--shuffle", type=_integer_at_least(10), metavar="N",
                            help=f"shuffles per reported hit for --shuffle-out, drawn from --seed [{DEFAULT_SHUFFLES}]")


def _build_parser():
    parser = _Parser(prog="gpuhmm", description="hmmsearch-identical profile searches, sharded over Dask (and GPUs).")
    parser.add_argument("--version", action="version", version=f"gpuhmm {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    search = commands.add_parser("search", help="search profile HMMs against a sequence database")
    search.add_argument("hmmfile", metavar="HMMFILE", help="HMMER models (text or binary, gzip allowed)")
    search.add_argument("seqfile", metavar="SEQFILE", help="FASTA (plain or gzip) or a `gpuhmm makedb` directory")
    _add_search_arguments(search)

    phmmer = commands.add_parser("phmmer", help="search protein sequences against a sequence database, as phmmer")
    phmmer.add_argument("queryfile", metavar="QUERYFILE", help="query proteins (FASTA, plain or gzip)")
    phmmer.add_argument("seqfile", metavar="SEQFILE", help="FASTA (plain or gzip) or a `gpuhmm makedb` directory")
    _add_search_arguments(phmmer)

    scan = commands.add_parser("scan", help="annotate each sequence with the models it matches, as hmmscan")
    scan.add_argument("hmmfile", metavar="HMMFILE", help="HMMER models (text or binary, gzip allowed; no hmmpress needed)")
    scan.add_argument("seqfile", metavar="SEQFILE", help="query sequences: FASTA (plain or gzip) or a `gpuhmm makedb` directory")
    _add_search_arguments(scan, "hmmscan")

    makedb = commands.add_parser("makedb", help="build a sharded sequence database from FASTA")
    makedb.add_argument("seqfile", metavar="SEQFILE")
    makedb.add_argument("outdir", metavar="OUTDIR")
    makedb.add_argument("--shards", type=_positive_int, default=1, metavar="N", help="shards, balanced by residues [1]")
    makedb.add_argument("--alphabet", choices=("amino", "dna", "rna"), help="sequence alphabet [guess]")

    split = commands.add_parser("splitmodels", help="split an HMM file into shards balanced by model length")
    split.add_argument("hmmfile", metavar="HMMFILE")
    split.add_argument("outdir", metavar="OUTDIR")
    split.add_argument("--shards", type=_positive_int, default=1, metavar="N", help="model shards [1]")

    merge = commands.add_parser("merge", help="merge `search --hits` files into HMMER tables")
    merge.add_argument("hits", metavar="HITS", nargs="+")
    merge.add_argument("--order", metavar="MANIFEST", help="`splitmodels` manifest: restores the models' input order")
    for flag in ("--tblout", "--domtblout", "--pfamtblout", "--domains", "--summary", "--summary-tsv"):
        merge.add_argument(flag, metavar="FILE")
    return parser


def _options(args):
    return SearchOptions.from_mapping(
        {name: getattr(args, name) for name in (
            "E", "T", "domE", "domT", "incE", "incT", "incdomE", "incdomT", "cut",
            "Z", "domZ", "F1", "F2", "F3", "max", "nobias", "seed")},
        source=f"gpuhmm {args.command}",
    )


def _search(args, command):
    from .cluster import DaskExecutor, available_cpus, local_gpus

    options = _options(args)
    if args.shuffle and not args.shuffle_out:
        raise GpuhmmError("--shuffle", "needs --shuffle-out FILE for its table")
    # Dask takes longer to import and start than everything else: start it first.
    executor = DaskExecutor(args.scheduler, args.cpu or available_cpus(), gpus=local_gpus(args.backend))
    read_ahead = _start_reading(args, executor)
    from . import runner

    search = runner.hmmsearch if args.command == "search" else runner.phmmer
    search(
        args.hmmfile if args.command == "search" else args.queryfile, args.seqfile, options,
        tblout=args.tblout, domtblout=args.domtblout, pfamtblout=args.pfamtblout,
        domains=args.domains, summary=args.summary, summary_tsv=args.summary_tsv, hits_file=args.hits,
        backend=args.backend, scheduler=args.scheduler, cpus=args.cpu,
        db_shards=args.db_shards, model_shards=args.model_shards, shard_memory=args.shard_memory,
        shuffle=args.shuffle or DEFAULT_SHUFFLES, shuffle_out=args.shuffle_out, command=command, executor=executor,
        read_ahead=read_ahead,
    )


def _start_reading(args, executor):
    """A helper process reading the FASTA file into the shards that workers of this process
    will hold, started before the imports (`seqdb.ReadAhead`); None for a makedb database, for
    a cluster's workers, which read database files, and for a file too large to gain from it."""
    from .seqdb import MANIFEST, READ_AHEAD_MAX_BYTES, ReadAhead

    sequences = Path(args.seqfile)
    if (executor.in_process and sequences.is_file() and sequences.name != MANIFEST
            and sequences.stat().st_size <= READ_AHEAD_MAX_BYTES):
        return ReadAhead(sequences, args.db_shards)
    return None


def _scan(args, command):
    from .cluster import DaskExecutor, available_cpus, local_gpus

    options = _options(args)
    executor = DaskExecutor(args.scheduler, args.cpu or available_cpus(), gpus=local_gpus(args.backend))
    read_ahead = _start_reading(args, executor)
    from .runner import hmmscan

    hmmscan(
        args.hmmfile, args.seqfile, options,
        tblout=args.tblout, domtblout=args.domtblout, pfamtblout=args.pfamtblout, domains=args.domains,
        backend=args.backend, scheduler=args.scheduler, cpus=args.cpu, db_shards=args.db_shards,
        shard_memory=args.shard_memory, command=command, executor=executor, read_ahead=read_ahead,
    )


def _makedb(args, command):
    from .seqdb import makedb

    database = makedb(args.seqfile, args.outdir, args.shards, alphabet=args.alphabet)
    log.info("%s: %d sequences, %d residues, %d shard(s)", args.outdir, database.sequences, database.residues, len(database.shards))


def _splitmodels(args, command):
    from .models import split_models

    shards = split_models(args.hmmfile, args.outdir, args.shards)
    log.info("%s: %d models in %d shard(s)", args.outdir, shards.models, len(shards.shards))


def _merge(args, command):
    from .runner import merge_hits_files

    merge_hits_files(
        args.hits, args.order, tblout=args.tblout, domtblout=args.domtblout, pfamtblout=args.pfamtblout,
        domains=args.domains, summary=args.summary, summary_tsv=args.summary_tsv, command=command,
    )


def _log_to_stderr():
    """gpuhmm's own progress lines on stderr; Dask's logging stays at its warnings."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s gpuhmm: %(message)s", datefmt="%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _build_parser().parse_args(argv)
    _log_to_stderr()
    command = shlex.join(["gpuhmm", *argv])
    run = {"search": _search, "phmmer": _search, "scan": _scan, "makedb": _makedb, "splitmodels": _splitmodels,
           "merge": _merge}[args.command]
    try:
        run(args, command)
    except GpuhmmError as error:
        print(f"gpuhmm {args.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"gpuhmm {args.command}: interrupted; no tables were written", file=sys.stderr)
        return 130
    return 0


def run():
    """The console script: `main`, then exit without the interpreter's slow teardown.

    Every output is closed and the Dask cluster shut down by the time `main` returns.
    """
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
