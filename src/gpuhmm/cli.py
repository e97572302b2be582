"""`gpuhmm search | phmmer | scan | jackhmmer | makedb | splitmodels | cluster | merge`: HMMER's
options, one-line errors.

Every error, a usage error included, is one line on stderr, `gpuhmm COMMAND: error: ...`, and
exit status 1, as hmmsearch's. The arguments themselves are defined in `cli_arguments`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import sys
from pathlib import Path

from .cli_arguments import build_parser
from .errors import GpuhmmError
from .options import (
    DEFAULT_SEARCH,
    EngineSettings,
    JackhmmerOptions,
    OutputFiles,
    PhmmerOptions,
    ReportSettings,
    SearchOptions,
    SequenceFormats,
    check_exclusive,
)

log = logging.getLogger("gpuhmm")

#: The hmmsearch options a search takes: the CLI's names for them are `SearchOptions`' fields.
HMMER_OPTIONS = tuple(field.name for field in dataclasses.fields(SearchOptions))


def _options(args):
    _check_exclusive(args)
    return SearchOptions.from_mapping({name: getattr(args, name) for name in HMMER_OPTIONS}, source=None)


def _check_exclusive(args):
    """Refuse options given together that HMMER refuses together, even at their default value."""
    check_exclusive(
        [name for name in HMMER_OPTIONS if getattr(args, name, None) is not None], getattr(args, "cut", None)
    )


def _report(args):
    return ReportSettings(
        noali=args.noali, acc=args.acc, textw=0 if args.notextw else args.textw or ReportSettings.textw
    )


def _phmmer_options(args):
    """phmmer's own options as given (the others keep phmmer's defaults)."""
    if args.mxfile is not None:
        raise GpuhmmError("--mxfile", "pyhmmer builds phmmer's models from built-in matrices only (--mx)")
    names = [field.name for field in dataclasses.fields(PhmmerOptions)]
    return PhmmerOptions(**{name: getattr(args, name) for name in names if getattr(args, name) is not None})


def _formats(args):
    """The formats asserted for the sequence files (`--qformat`, `--tformat`), those `args` has."""
    return SequenceFormats(qformat=getattr(args, "qformat", None), tformat=getattr(args, "tformat", None))


def _outputs(args):
    """The outputs of `search`, `phmmer` and `scan`; the report goes to stdout unless `-o`."""
    searching = args.command != "scan"
    return OutputFiles(
        tblout=args.tblout,
        domtblout=args.domtblout,
        pfamtblout=args.pfamtblout,
        domains=args.domains,
        summary=args.summary if searching else None,
        summary_tsv=args.summary_tsv if searching else None,
        hits=args.hits if searching else None,
        shuffle_out=args.shuffle_out if searching else None,
        output=args.output or "-",
        alignments=args.alignments if searching else None,
        report=_report(args),
        **({"shuffles": args.shuffle} if searching and args.shuffle is not None else {}),
    )


def _engine(args):
    """The engine settings `args` give; EngineSettings' defaults for the rest."""
    given = dict(
        backend=args.backend,
        scheduler=args.scheduler,
        cpus=args.cpu,
        db_shards=args.db_shards,
        model_shards=getattr(args, "model_shards", None),
        shard_memory=args.shard_memory,
        domaindef=getattr(args, "domaindef", None),
    )
    return EngineSettings(**{name: value for name, value in given.items() if value is not None})


def _search(args, command):
    """`search`, `phmmer` and `scan`: the executor (a Dask cluster, or a pool of threads here
    starting the GPU) and the reading of a sequence file start first, before the imports."""
    from .placement import expected_cells, start_executor

    options, outputs, engine, formats = _options(args), _outputs(args), _engine(args), _formats(args)
    phmmer = {"builder": _phmmer_options(args)} if args.command == "phmmer" else {}
    from .output.files import check_outputs

    # Before the cluster starts, so that a bad path fails at once; the API checks again for
    # callers of its own (a few stat calls).
    query_file = args.queryfile if args.command == "phmmer" else args.hmmfile
    check_outputs(outputs.named(), (query_file, args.seqfile))
    executor = start_executor(engine, expected_cells(query_file, args.seqfile, args.command == "phmmer"))
    read_ahead = _start_reading(
        args,
        executor,
        formats.query if args.command == "scan" else formats.target,
        engine.database_shards(args.command),
    )
    from . import api

    run = {"search": api.hmmsearch, "phmmer": api.phmmer, "scan": api.hmmscan}[args.command]
    run(
        query_file,
        args.seqfile,
        options,
        outputs,
        engine,
        formats=formats,
        command=command,
        executor=executor,
        read_ahead=read_ahead,
        **phmmer,
    )


def _start_reading(args, executor, format, db_shards):
    """A helper process reading the sequence file (in `format`, None: detected) into the
    `db_shards` shards that workers of this process will hold, started before the imports
    (`db.readahead`); None
    for a makedb database, for a cluster's workers, which read database files, for a file too
    large to gain from it, and for one a search in this process streams."""
    from .db.format import MANIFEST
    from .db.inputs import is_stream
    from .db.readahead import READ_AHEAD_MAX_BYTES, ReadAhead
    from .db.stream import chosen

    sequences = Path(args.seqfile)
    program = {"search": "hmmsearch", "scan": "hmmscan"}.get(args.command, args.command)
    backend = "cpu" if executor.gpus == 0 else "gpu"  # "gpu": possibly, which holds the database
    shuffle_out = getattr(args, "shuffle_out", None)
    if (
        executor.in_process
        and not is_stream(sequences)
        and sequences.is_file()
        and sequences.name != MANIFEST
        and sequences.stat().st_size <= READ_AHEAD_MAX_BYTES
        and not chosen(program, backend, executor, shuffle_out, sequences, args.shard_memory, format)
    ):
        return ReadAhead(sequences, db_shards, format)
    return None


def _makedb(args, command):
    from .db.database import makedb
    from .db.fasta import alphabet_name
    from .db.models import first_model

    alphabet = args.alphabet or (alphabet_name(first_model(args.models).alphabet) if args.models else None)
    format = SequenceFormats(tformat=args.tformat).target
    database = makedb(args.seqfile, args.outdir, args.shards, alphabet=alphabet, format=format)
    log.info(
        "%s: %d sequences, %d residues, %d shard(s)",
        args.outdir,
        database.sequences,
        database.residues,
        len(database.shards),
    )


def _splitmodels(args, command):
    from .db.models import split_models

    shards = split_models(args.hmmfile, args.outdir, args.shards)
    log.info("%s: %d models in %d shard(s)", args.outdir, shards.models, len(shards.shards))


def _merge(args, command):
    from .api import merge_hits_files

    outputs = OutputFiles(
        tblout=args.tblout,
        domtblout=args.domtblout,
        pfamtblout=args.pfamtblout,
        domains=args.domains,
        summary=args.summary,
        summary_tsv=args.summary_tsv,
    )
    merge_hits_files(args.hits, args.order, outputs, command=command)


#: jackhmmer's options besides hmmsearch's: `JackhmmerOptions`' fields.
JACKHMMER_OPTIONS = tuple(field.name for field in dataclasses.fields(JackhmmerOptions))


def _jackhmmer(args, command):
    """`jackhmmer`: as `_search`, the cluster and the reading of the database start first; the
    database is split into as many shards as worker threads unless `--db-shards` says."""
    from .placement import expected_cells, start_executor

    formats = _formats(args)
    _check_exclusive(args)
    given = {name: getattr(args, name) for name in HMMER_OPTIONS if name != "cut"}
    search = SearchOptions.from_mapping(
        {name: value if value is not None else getattr(DEFAULT_SEARCH, name) for name, value in given.items()},
        source=None,
    )
    chosen = {name: getattr(args, name) for name in JACKHMMER_OPTIONS if getattr(args, name) is not None}
    if args.eset is not None:
        chosen["effective"] = "set"
    settings = JackhmmerOptions(**chosen)
    builder = _phmmer_options(args)
    outputs = OutputFiles(
        tblout=args.tblout,
        domtblout=args.domtblout,
        output=args.output or "-",
        alignments=args.alignments,
        report=_report(args),
    )
    engine = _engine(args)
    from .output.files import check_outputs

    check_outputs({**outputs.named(), **settings.checked_outputs()}, (args.queryfile, args.seqfile))
    expected = expected_cells(args.queryfile, args.seqfile, True, settings.max_iterations)
    executor = start_executor(engine, expected)
    read_ahead = _start_reading(args, executor, formats.target, engine.database_shards("jackhmmer"))
    from . import api

    api.jackhmmer(
        args.queryfile,
        args.seqfile,
        search,
        outputs,
        engine,
        settings=settings,
        builder=builder,
        formats=formats,
        command=command,
        executor=executor,
        read_ahead=read_ahead,
    )


def _log_to_stderr():
    """gpuhmm's own progress lines on stderr; Dask's logging, where it runs, stays at its warnings."""
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s gpuhmm: %(message)s", datefmt="%H:%M:%S"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def _cluster(args, command):
    from .cluster import WarmCluster, serve

    serve(
        WarmCluster(
            backend=args.backend,
            cpus=args.cpu,
            host=args.host,
            port=args.port,
            scheduler_file=args.scheduler_file,
            tls_ca_file=args.tls_ca_file,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
        )
    )


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    _log_to_stderr()
    command = shlex.join(["gpuhmm", *argv])
    run = {
        "search": _search,
        "phmmer": _search,
        "scan": _search,
        "jackhmmer": _jackhmmer,
        "makedb": _makedb,
        "splitmodels": _splitmodels,
        "merge": _merge,
        "cluster": _cluster,
    }[args.command]
    try:
        run(args, command)
    except GpuhmmError as error:
        print(f"gpuhmm {args.command}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as interrupt:
        written = interrupt.args[0] if interrupt.args else "no tables were written"
        print(f"gpuhmm {args.command}: interrupted; {written}", file=sys.stderr)
        return 130
    return 0


def run():
    """The console script: `main`, then exit without the interpreter's slow teardown.

    Every output is closed and the executor shut down by the time `main` returns.
    """
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
