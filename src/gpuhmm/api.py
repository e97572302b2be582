"""One search from files to outputs: inputs → database shards → engine → merge → outputs.

`hmmsearch`, `phmmer` and `hmmscan` are what `gpuhmm search`, `phmmer` and `scan` run; they
also take pyhmmer's objects instead of files, as `pyhmmer.hmmsearch` does (`db.memory`).
`merge_hits_files` is what `gpuhmm merge` runs at the end of the workflow, where each model
shard was searched by its own job. Every output is checked before any work starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pyhmmer.errors import MissingCutoffs

from . import iterative, local, placement, streamed
from ._host import available_cpus
from .db import database as seqdb
from .db import fasta, inputs, memory, models, sources, stream
from .errors import GpuhmmError
from .output import jackhmmer_report, merge, summary, tables
from .output.files import check_outputs
from .output.report import Report, Stopwatch
from .output.report_header import ReportHeader, header_options, jackhmmer_header_options
from .search import run_scan, run_search
from .shuffle import significance
from .worker import STATE, prepare_worker

if TYPE_CHECKING:
    from .options import EngineSettings, OutputFiles, PhmmerOptions, SearchOptions, SequenceFormats

log = logging.getLogger("gpuhmm")


@dataclasses.dataclass(frozen=True)
class _Job:
    """One search or scan as asked for: the program whose outputs it writes, its inputs as the
    user named them, its settings, and the command line that the tables' footer names.
    `executor` is an executor already started (`placement.start_executor`) and `read_ahead` a
    `ReadAhead` of the sequences already reading (the CLI starts both before its imports)."""

    program: str  # hmmsearch | phmmer | hmmscan | jackhmmer
    queries: object  # the HMM file, or phmmer's query sequences, as outputs name them (`memory.name`)
    sequences: object
    options: SearchOptions
    outputs: OutputFiles
    engine: EngineSettings
    command: str
    executor: object = None
    read_ahead: object = None
    phmmer: PhmmerOptions | None = None  # phmmer's own options
    given: tuple = ()  # the queries and the sequences themselves: paths, or pyhmmer objects
    formats: SequenceFormats = dataclasses.field(kw_only=True)  # the formats asserted (`of`)

    @classmethod
    def of(cls, program, queries, sequences, *settings, formats):
        """The job of these inputs (paths, or pyhmmer objects) and settings, in field order, and
        the formats asserted for its sequence files, those `program` has an option for."""
        absent = {"hmmsearch": "qformat", "hmmscan": "tformat"}.get(program)
        if absent and getattr(formats, absent):
            raise GpuhmmError(f"--{absent}", f"{program} has no such option")
        names = memory.name(queries, _query_kind(program)), memory.name(sequences, "sequences")
        return cls(program, *names, *settings, given=(queries, sequences), formats=formats)

    @property
    def sequences_format(self):
        """Easel's name of the format asserted for `sequences` (hmmscan's queries, the others'
        targets), or None."""
        return self.formats.query if self.program == "hmmscan" else self.formats.target


def _query_kind(program):
    """What `program`'s queries are: phmmer's and jackhmmer's are sequences."""
    return "queries" if program in ("phmmer", "jackhmmer") else "models"


def hmmsearch(
    models_file,
    sequences,
    options,
    outputs,
    engine,
    *,
    formats,
    command="gpuhmm search",
    executor=None,
    read_ahead=None,
):
    """Search every model of `models_file` against `sequences` (a sequence file, in the format
    `formats.tformat` asserts or Easel detects, or a makedb directory). Returns the merged
    `TopHits` of each model in file order; writes the requested outputs."""
    settings = (options, outputs, engine, command, executor, read_ahead)
    job = _Job.of("hmmsearch", models_file, sequences, *settings, formats=formats)

    def read(path):
        hmms = sources.query_models(path, job.queries, allow_empty=bool(outputs.hits))
        models.check_cutoffs(hmms, options.bit_cutoffs, job.queries)
        return hmms

    return _search(job, read, models_reread=True)


def phmmer(
    queries_file,
    sequences,
    options,
    outputs,
    engine,
    *,
    builder,
    formats,
    command="gpuhmm phmmer",
    executor=None,
    read_ahead=None,
):
    """Search each protein of `queries_file` against `sequences`, as phmmer does: each query
    becomes phmmer's single-sequence model (`models.single_sequence_models`, with `builder`'s
    score system and calibration), and the models are searched as hmmsearch searches. The
    files are in the formats `formats` asserts, or those Easel detects. Returns the merged
    `TopHits` of each query."""
    settings = (options, outputs, engine, command, executor, read_ahead, builder)
    job = _Job.of("phmmer", queries_file, sequences, *settings, formats=formats)
    queries, header = [], []

    def read(path):
        found = sources.query_sequences(path, job.queries, formats.query)
        # phmmer reads its queries as protein, and skips a query without residues; its tables
        # open with the column header only where the file's first query has residues.
        queries.extend(query for query in found if len(query))
        header.append(bool(found and len(found[0])))
        hmms = models.single_sequence_models(queries, options.seed, builder)
        models.check_cutoffs(hmms, options.bit_cutoffs, job.queries)
        return hmms

    return _search(job, read, queries=queries, header=header)


def hmmscan(
    models_file,
    sequences,
    options,
    outputs,
    engine,
    *,
    formats,
    command="gpuhmm scan",
    executor=None,
    read_ahead=None,
):
    """Annotate each sequence of `sequences` (a sequence file, in the format `formats.qformat`
    asserts or Easel detects, or a makedb directory) with the models of `models_file`, as
    hmmscan does (Z: the number of models, unless -Z). Returns one TopHits per sequence, in
    file order, and writes the requested outputs."""
    settings = (options, outputs, engine, command, executor, read_ahead)
    job = _Job.of("hmmscan", models_file, sequences, *settings, formats=formats)

    with _prepared(job, lambda path: sources.query_models(path, job.queries)) as run:
        log.info(
            "scan: %d sequence(s) in %d shard(s) × %d model(s); %s backend; %s",
            run.database.sequences,
            len(run.database.shards),
            len(run.hmms),
            run.backend,
            run.executor.describe(),
        )
        started = time.perf_counter()
        try:
            per_sequence = run_scan(run.hmms, run.database, options, run.executor, run.cpus, run.backend)
        except MissingCutoffs as missing:
            # hmmscan stops there, not before: where the model passes a sequence's bias filter.
            raise GpuhmmError(
                job.queries,
                f"model {missing.model_name!r} has no {options.bit_cutoffs} cutoffs (needed by the cutoff "
                "option), and a sequence passes its MSV and bias filters",
            ) from None
        run.executor.close_in_background()
        lengths = [len(hits.query) for hits in per_sequence]
        report = _report(job, lengths, started)
        footers = tables.hmmer_footers(command, job.sequences, job.queries, "hmmscan")
        tables.write_outputs(per_sequence, dataclasses.asdict(outputs), footers, scan=True, report=report)
    return per_sequence


@dataclasses.dataclass
class _Run:
    """What the prelude of a search or scan sets up."""

    executor: object  # `placement.start_executor`'s
    backend: str
    cpus: int
    hmms: list
    searched: object  # the models as tasks take them: `hmms`, or a `ModelsOnDisk` of them
    inputs: tuple  # the queries and sequences as read: files named, streams' copies, or in memory
    database: object = None  # a db.database one, or the db.stream.StreamedFile a streamed search read
    streamed: str | None = None  # how the search streams its sequence file, if it does (`db.stream.chosen`)
    stages: list = dataclasses.field(default_factory=list)

    def timed(self, name, started):
        self.stages.append({"name": name, "seconds": time.perf_counter() - started})


@contextlib.contextmanager
def _prepared(job, read_models, models_reread=False, rounds=1):
    """The prelude every search and scan shares: check the outputs, start the executor, read the
    models, choose the backend, prepare the workers and open the database; the executor closes
    when the block ends. Standard input (`-`) and other streams are read once, into a temporary
    file; errors still name them as the user did.

    `models_reread`: read_models(path) gives the models of the file as they are, so workers in
    other processes may read the file themselves (`ModelsOnDisk`), and every GPU worker
    configures them all ahead of its tasks. `rounds`: the searches of the database the job may
    run (jackhmmer's rounds), which `--backend auto` weighs.
    """
    check_outputs(job.outputs.named(), (job.queries, job.sequences))
    if str(job.queries) == inputs.STDIN == str(job.sequences):
        what = _query_kind(job.program)
        raise GpuhmmError(inputs.STDIN, f"the {what} and the sequences cannot both come from standard input")
    engine = job.engine
    cpus = engine.threads or available_cpus()
    executor = job.executor
    if executor is None:
        expected = placement.expected_cells(*job.given, _query_kind(job.program) == "queries", rounds)
        executor = placement.start_executor(engine, expected)
    with executor, contextlib.ExitStack() as cleanup:
        if job.read_ahead is not None:
            cleanup.callback(job.read_ahead.close)
        queries_path, sequences_path = (sources.readable(name, cleanup) for name in job.given)
        started = time.perf_counter()
        hmms = read_models(queries_path)
        searched = (
            models.ModelsOnDisk.of(queries_path, hmms) if models_reread and memory.is_file(queries_path) else hmms
        )
        run = _Run(executor, engine.backend, cpus, hmms, searched, (queries_path, None))
        run.timed("read models", started)
        if not memory.is_file(sequences_path):
            started = time.perf_counter()
            sequences_path = sources.written(sequences_path, job.sequences, hmms, cleanup)
            run.timed("write sequences", started)
        cells = placement.job_cells(hmms, sequences_path, rounds)
        run.backend = placement.resolve_backend(engine.backend, executor.gpus, engine.scheduler, cells, cpus)
        # Workers in other processes are prepared once their cluster has started: waiting for it.
        # Only models on disk are configured ahead. HMMs in memory (phmmer's, jackhmmer's) travel
        # in the shared context: Dask's plugins go through cloudpickle, which fails on pyhmmer's HMMs.
        started = time.perf_counter()
        on_disk = searched if isinstance(searched, models.ModelsOnDisk) else None
        executor.prepare_workers(prepare_worker, [hmm.M for hmm in hmms], run.backend, engine.shard_memory, on_disk)
        run.timed("prepare workers", started)
        run.inputs = (queries_path, sequences_path)
        streams = stream.chosen(
            job.program, run.backend, executor, job.outputs.shuffle_out, sequences_path, engine.shard_memory,
            job.sequences_format,
        )  # fmt: skip
        run.streamed = streams if hmms else None  # no model (an empty shard's file): nothing to stream
        if not run.streamed:
            started = time.perf_counter()
            run.database = _open_database(
                sequences_path,
                job.sequences_format,
                hmms,
                engine.database_shards(job.program),
                cleanup,
                executor,
                job.read_ahead,
            )
            run.timed("database", started)
        if engine.backend == "auto":
            log.info(placement.auto_choice(run.backend, cells, cpus))
        if engine.domaindef == "gpu" and run.backend == "cpu":
            log.warning("--domaindef gpu: on the CPU backend, pyhmmer defines the domains, as with --domaindef cpu")
        yield run


def _search(job, read_models, models_reread=False, queries=None, header=()):
    """Search the models read_models(path) gives against the job's sequences; `queries` are
    phmmer's query sequences, once read, which its report names, and `header` holds False once
    read where its tables open without the column header."""
    options, outputs = job.options, job.outputs
    with _prepared(job, read_models, models_reread) as run:
        hmms = run.hmms
        model_shards = max(1, min(job.engine.model_shards, len(hmms))) if job.engine.model_shards else None
        cluster = run.executor.describe()
        searching = time.time()
        search = functools.partial(
            run_search, run.searched, options=options, executor=run.executor, model_groups=model_shards,
            slots=run.cpus, backend=run.backend, domaindef=job.engine.domains_on,
        )  # fmt: skip
        if not run.streamed:
            _searched(hmms, run, cluster, "in")
        result, run.database = _search_all(job, run, hmms, search)
        if run.streamed:
            _searched(hmms, run, cluster, "streamed in")
        database = run.database
        run.executor.close_in_background()
        run.stages.append({"name": "search", "seconds": result.wall_seconds})
        first_kernel = local.first_kernel_seconds(STATE.gpu_engine if run.executor.in_process else None, searching)
        if first_kernel is not None:
            log.info("first GPU kernel launched %.2fs after the process started", first_kernel)

        started = time.perf_counter()
        merged = [merge.reduce_shards(shard_hits) for shard_hits in result.hits_by_model]
        report = _report(job, [hmm.M for hmm in hmms], started - result.wall_seconds, queries)
        footers = tables.hmmer_footers(job.command, job.queries, job.sequences)
        paths = dict(dataclasses.asdict(outputs), shuffle_out=None)
        tables.write_outputs(merged, paths, footers, report=report, header=all(header), queries=queries or None)
        record = summary.search_record(
            job.command, run.backend, cluster, job.queries, job.sequences, options, database, model_shards, result
        )
        if outputs.hits:
            merge.save_hits(outputs.hits, merged, _searched_how(job, run, record))
        run.timed("merge and write", started)
        if outputs.summary or outputs.summary_tsv:
            summary.write_summary(
                outputs.summary,
                outputs.summary_tsv,
                dict(record, models=summary.model_counts(merged), stages=run.stages, first_kernel_s=first_kernel),
            )
        if outputs.shuffle_out:
            # Last, once every other output is written: an interrupted shuffle leaves them whole.
            try:
                shuffled = significance(hmms, merged, database, outputs.shuffles, options.seed, run.backend, run.cpus)
            except KeyboardInterrupt:
                raise KeyboardInterrupt("every output but the shuffle table was written") from None
            tables.write_outputs(merged, {"shuffle_out": outputs.shuffle_out}, shuffled=shuffled)
    return merged


def _search_all(job, run, hmms, search):
    """(`search.SearchResult`, what was read) of search(database) over the job's sequences as
    `run` holds them: its database, or the file streamed (`run.streamed`) in pieces or blocks."""
    if not run.streamed:
        return search(run.database), run.database
    path, alphabet, format = run.inputs[1], hmms[0].alphabet, job.sequences_format
    if run.streamed == "pieces":
        shards = job.engine.database_shards(job.program)
        return streamed.search_pieces(path, alphabet, format, shards, job.engine.shard_memory, search)
    return streamed.search(hmms, path, alphabet, format, job.options, run.cpus)


def _searched(hmms, run, cluster, how):
    """Logs what the search covers: models, sequences, how the database was held."""
    database, parts = run.database, "block(s)" if run.streamed else "shard(s)"
    log.info(
        "%d model(s), %d nodes × %d sequence(s), %d residues %s %d %s; %s backend; %s",
        len(hmms), sum(hmm.M for hmm in hmms), database.sequences, database.residues, how, len(database.shards), parts,
        run.backend, cluster,
    )  # fmt: skip


def _searched_how(job, run, record):
    """What a hits file records of its search, for `gpuhmm merge` to check: the options, the
    database's digest, Z, and the model file searched (and its place among model shards)."""
    queries, sequences = run.inputs
    options = job.options.command_line() + (job.phmmer.command_line() if job.phmmer else [])
    return {
        "search": {"program": job.program, "options": options},
        "database": {"sha256": seqdb.content_digest(sequences), "sequences": run.database.sequences},
        "Z": record["Z"],
        "model_shard": models.shard_place(queries) if memory.is_file(queries) else models.memory_place(run.hmms),
        "run": record,
        "stages": run.stages,
    }


def merge_hits_files(hits_files, order, outputs, *, command="gpuhmm merge"):
    """Merge the hits files of model shards into tables, models back in input-file order. The
    files must have been searched alike (`merge.check_alike`), and with `order` (the
    `splitmodels` manifest) hold each of its model shards once."""
    check_outputs(outputs.named(), (*hits_files, order))
    started = time.perf_counter()
    contents = [merge.load_hits(path) for path in hits_files]
    runs = [content["run"] for content in contents]
    models_file = runs[0]["models_file"] if runs else "-"
    merge.check_alike(contents)
    shards = None
    if order is not None:
        shards = models.ModelShards.open(order)
        models_file = shards.source
    merged = merge.in_model_order(contents, shards)
    footers = tables.hmmer_footers(command, models_file, runs[0]["sequences_file"] if runs else "-")
    tables.write_outputs(merged, dataclasses.asdict(outputs), footers)
    if outputs.summary or outputs.summary_tsv:
        summary.write_summary(
            outputs.summary,
            outputs.summary_tsv,
            summary.merged_runs(runs, contents, merged, command, models_file, started),
        )
    return merged


def _report(job, sizes, started, queries=None):
    """The `-o` report's and `-A` alignment's settings. Each query's "CPU time" is its share (by
    `sizes`, its model length or sequence length) of this process's CPU time and of the wall
    time since `started`: queries are searched together, not one after another."""
    query_file, target_file = (job.sequences, job.queries) if job.program == "hmmscan" else (job.queries, job.sequences)
    options = header_options(job.program, job.options, job.outputs, job.phmmer, job.formats)
    header = ReportHeader(job.program, str(query_file), str(target_file), options, shown_as="gpuhmm")
    elapsed, total = time.perf_counter() - started, sum(sizes) or 1
    cpu = os.times()
    times = [Stopwatch(cpu.user * size / total, cpu.system * size / total, elapsed * size / total) for size in sizes]
    return Report(header, job.outputs.report, queries or None, times, job.outputs.alignments)


def _open_database(sequences, format, hmms, db_shards, cleanup, executor, read_ahead):
    """A makedb directory as it is, or a sequence file (in `format`, None: detected) sharded: in
    memory for workers in this process (perhaps read already by `read_ahead`), into a temporary
    database for a cluster's, with a shard for every worker at least. The alphabet is the
    models', as hmmsearch's is."""
    wanted = fasta.alphabet_name(hmms[0].alphabet) if hmms else None
    path = Path(sequences)
    if path.is_dir() or path.name == seqdb.MANIFEST:
        database = seqdb.SequenceDatabase.open(path)
        if wanted and database.alphabet_name != wanted:
            problem = f"alphabet mismatch: the database is {database.alphabet_name}, the models are {wanted}"
            raise GpuhmmError(path, problem)
        return database
    if executor.in_process:
        database = seqdb.makedb(path, None, db_shards, alphabet=wanted, read_ahead=read_ahead, format=format)
        cleanup.callback(seqdb.release, database)
        cleanup.callback(STATE.shards.release, database)
        return database
    workdir = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="gpuhmm-db-"))
    return seqdb.makedb(path, workdir, max(db_shards, executor.worker_count()), alphabet=wanted, format=format)


def jackhmmer(
    queries_file,
    sequences,
    options,
    outputs,
    engine,
    *,
    settings,
    builder,
    formats,
    command="gpuhmm jackhmmer",
    executor=None,
    read_ahead=None,
):
    """Search each protein of `queries_file` iteratively against `sequences`, as jackhmmer does
    (`iterative`): each round of every query is one search of the sharded database, which is
    read once and stays resident. `options` are the searches', `settings` the rounds, model
    construction and checkpoints, `builder` the first round's score system and calibration,
    `formats` the formats asserted for the files (None: Easel detects them). Returns the
    queries with residues, in file order, each with its rounds (`iterative.Query`)."""
    settings.check_search(options)
    for flag, path in outputs.named().items():
        if path is not None and flag not in ("-o", "-A", "--tblout", "--domtblout"):
            raise GpuhmmError(flag, "jackhmmer writes no such output")
    check_outputs({**outputs.named(), **settings.checked_outputs()}, (queries_file, sequences))
    in_order = (options, outputs, engine, command, executor, read_ahead, builder)
    job = _Job.of("jackhmmer", queries_file, sequences, *in_order, formats=formats)
    started = {}

    def read(path):
        found = sources.query_sequences(path, job.queries, formats.query)
        started["builder"] = iterative.new_builder(settings, found[0].alphabet, options.seed, builder)
        started["queries"] = iterative.queries_of(found)
        threads = engine.threads or available_cpus()
        started["models"] = iterative.first_models(started["queries"], started["builder"], threads)
        return started["models"]

    with _prepared(job, read, rounds=settings.max_iterations) as run:
        database = run.database
        held = f"{database.sequences} sequence(s) in {len(database.shards)} shard(s)" if database else run.streamed
        log.info(
            "jackhmmer: %d query(ies), %d round(s) at most × %s; %s backend; %s",
            *(len(started["queries"]), settings.max_iterations, held, run.backend, run.executor.describe()),
        )

        def search(hmms, number):
            searched = functools.partial(
                run_search, hmms, options=options, executor=run.executor, slots=run.cpus, backend=run.backend,
                domaindef=engine.domains_on, label=f"jackhmmer round {number}",
            )  # fmt: skip
            result, _ = _search_all(job, run, hmms, searched)
            return [merge.reduce_shards(shard_hits) for shard_hits in result.hits_by_model]

        rounds = (started["queries"], started["models"], started["builder"], search, settings, run.cpus)
        queries = iterative.iterate(*rounds)
        run.executor.close_in_background()
        report = jackhmmer_report.JackhmmerReport(
            str(job.queries),
            str(job.sequences),
            jackhmmer_header_options(options, settings, builder, outputs, engine, formats),
            outputs.report,
            outputs.alignments,
            settings.max_iterations,
            command,
        )
        paths = {kind: getattr(outputs, kind) for kind in ("output", "alignments", "tblout", "domtblout")}
        jackhmmer_report.write_outputs(queries, paths, settings.checkpoints(), report)
    return queries
