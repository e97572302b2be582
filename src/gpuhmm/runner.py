"""One search from files to tables: inputs → database shards → engine → merge → tables.

`hmmsearch()` is what `gpuhmm search` runs; `merge_hits_files()` is what `gpuhmm merge` runs
at the end of the workflow, where each model shard was searched by its own job.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from pathlib import Path

from . import merge, models, pipeline, seqdb
from .cluster import DaskExecutor, available_cpus, local_gpus
from .errors import GpuhmmError
from .options import DEFAULT_SHUFFLES, SearchOptions

log = logging.getLogger("gpuhmm")

def hmmsearch(models_file, sequences, options=SearchOptions(), *, hits_file=None, **keywords):
    """Search every model of `models_file` against `sequences` (FASTA or a makedb directory).

    Returns the merged `TopHits` of each model in file order; writes the requested outputs.
    See `_search` for the keywords.
    """
    def read():
        hmms = models.read_models(models_file, allow_empty=bool(hits_file))
        models.check_cutoffs(hmms, options.bit_cutoffs, models_file)
        return hmms

    return _search(read, models_file, sequences, options, hits_file=hits_file, models_reread=True, **keywords)


def phmmer(queries_file, sequences, options=SearchOptions(), *, command="gpuhmm phmmer", **keywords):
    """Search each protein of `queries_file` (FASTA) against `sequences`, as phmmer does: each
    query becomes phmmer's single-sequence model (`models.single_sequence_models`), and the
    models are searched as hmmsearch searches. Returns the merged `TopHits` of each query."""
    def read():
        queries = seqdb.read_sequences(queries_file, "amino")
        hmms = models.single_sequence_models(queries, options.seed)
        models.check_cutoffs(hmms, options.bit_cutoffs, queries_file)
        return hmms

    return _search(read, queries_file, sequences, options, command=command, **keywords)


def hmmscan(
    models_file,
    sequences,
    options=SearchOptions(),
    *,
    tblout=None,
    domtblout=None,
    pfamtblout=None,
    domains=None,
    backend="auto",
    scheduler=None,
    cpus=None,
    db_shards=1,
    shard_memory=None,
    command="gpuhmm scan",
    executor=None,
    read_ahead=None,
):
    """Annotate each sequence of `sequences` (FASTA or a makedb directory) with the models of
    `models_file`, as hmmscan does (Z: the number of models, unless -Z). Returns one TopHits
    per sequence, in file order, and writes the requested tables."""
    cpus = cpus or available_cpus()
    executor = executor or DaskExecutor(scheduler, cpus, gpus=local_gpus(backend))
    with executor, contextlib.ExitStack() as cleanup:
        if read_ahead is not None:
            cleanup.callback(read_ahead.close)
        backend = pipeline.resolve_backend(backend, executor.gpus)
        hmms = models.read_models(models_file)
        models.check_cutoffs(hmms, options.bit_cutoffs, models_file)
        executor.prepare_workers(pipeline.prepare_worker, [hmm.M for hmm in hmms], backend, shard_memory)
        database = _open_database(sequences, hmms, db_shards, cleanup, executor, read_ahead)
        log.info("scan: %d sequence(s) in %d shard(s) × %d model(s); %s backend; %s",
                 database.sequences, len(database.shards), len(hmms), backend, executor.describe())
        per_sequence = pipeline.scan(hmms, database, options, executor, slots=cpus, backend=backend)
        executor.close_in_background()
        footer = merge.hmmer_footer(command, models_file, sequences, scan=True)
        merge.write_outputs(per_sequence, {"tblout": tblout, "domtblout": domtblout, "pfamtblout": pfamtblout},
                            domains, footer, scan=True)
    return per_sequence


def _search(
    read_models,
    models_file,
    sequences,
    options,
    *,
    tblout=None,
    domtblout=None,
    pfamtblout=None,
    domains=None,
    summary=None,
    summary_tsv=None,
    hits_file=None,
    shuffle=DEFAULT_SHUFFLES,
    shuffle_out=None,
    backend="auto",
    scheduler=None,
    cpus=None,
    db_shards=1,
    model_shards=None,
    shard_memory=None,
    command="gpuhmm search",
    executor=None,
    read_ahead=None,
    models_reread=False,
):
    """Search the models read_models() gives (read from `models_file`) against `sequences`.

    `models_reread`: read_models() gives the models of `models_file` as they are, so workers in
    other processes may read the file themselves (`models.ModelsOnDisk`), and every GPU worker,
    this process's included, configures them all ahead of its tasks (`pipeline.prepare_worker`).

    `shard_memory` is the bytes each worker may keep database shards resident in (None: half
    its GPU's memory, or half the host's on the CPU backend).
    `shuffle` (N) and `shuffle_out` (a path) add the table of empirical P-values from N shuffles
    of each reported hit's target (`gpuhmm.shuffle`).
    `executor` is a `DaskExecutor` already starting and `read_ahead` a `seqdb.ReadAhead` of
    `sequences` already reading (the CLI starts both before its imports).
    """
    stages = []
    cpus = cpus or available_cpus()
    executor = executor or DaskExecutor(scheduler, cpus, gpus=local_gpus(backend))
    with executor, contextlib.ExitStack() as cleanup:
        if read_ahead is not None:
            cleanup.callback(read_ahead.close)
        backend = pipeline.resolve_backend(backend, executor.gpus)
        started = time.perf_counter()
        hmms = read_models()
        stages.append({"name": "read models", "seconds": time.perf_counter() - started})

        # Workers in other processes are prepared once their cluster has started: waiting for it.
        started = time.perf_counter()
        searched = models.ModelsOnDisk.of(models_file, hmms) if models_reread else hmms
        executor.prepare_workers(pipeline.prepare_worker, [hmm.M for hmm in hmms], backend, shard_memory, searched)
        stages.append({"name": "prepare workers", "seconds": time.perf_counter() - started})

        started = time.perf_counter()
        database = _open_database(sequences, hmms, db_shards, cleanup, executor, read_ahead)
        stages.append({"name": "database", "seconds": time.perf_counter() - started})

        if model_shards is not None:
            model_shards = max(1, min(model_shards, len(hmms)))
        cluster = executor.describe()
        log.info(
            "%d model(s), %d nodes × %d sequence(s), %d residues in %d shard(s); %s backend; %s",
            len(hmms), sum(hmm.M for hmm in hmms), database.sequences, database.residues,
            len(database.shards), backend, cluster,
        )
        result = pipeline.search(searched, database, options, executor, model_shards, slots=cpus, backend=backend)
        executor.close_in_background()
        stages.append({"name": "search", "seconds": result.wall_seconds})

        started = time.perf_counter()
        merged = [merge.reduce_shards(shard_hits) for shard_hits in result.hits_by_model]
        footer = merge.hmmer_footer(command, models_file, sequences)
        shuffled = None
        if shuffle_out:
            started_shuffles = time.perf_counter()
            shuffled = (shuffle_out, pipeline.significance(hmms, merged, database, shuffle, options.seed, backend))
            stages.append({"name": f"{shuffle} shuffles per hit", "seconds": time.perf_counter() - started_shuffles})
        merge.write_outputs(
            merged, {"tblout": tblout, "domtblout": domtblout, "pfamtblout": pfamtblout}, domains, footer,
            shuffled=shuffled,
        )
        run = {
            "program": "gpuhmm search",
            "command": command,
            "backend": backend,
            "cluster": cluster,
            "models_file": str(models_file),
            "sequences_file": str(sequences),
            "sequences": database.sequences,
            "residues": database.residues,
            "Z": options.Z or database.sequences,
            "db_shards": len(database.shards),
            "model_shards": model_shards or "guided",
            "tasks": result.tasks,
            "cells": result.cells,
            "task_seconds": result.task_seconds,
            "workers": result.workers,
            "filters": result.filter_counts,
        }
        if result.stage_seconds:
            run["gpu_stages"] = gpu_stage_summary(result.stage_seconds)
        if hits_file:
            merge.save_hits(hits_file, merged, {"model_file": Path(models_file).name, "run": run, "stages": stages})
        stages.append({"name": "merge and write", "seconds": time.perf_counter() - started})
        if summary or summary_tsv:
            merge.write_summary(summary, summary_tsv, dict(run, models=merge.model_counts(merged), stages=stages))
    return merged


def merge_hits_files(hits_files, order=None, *, tblout=None, domtblout=None, pfamtblout=None,
                     domains=None, summary=None, summary_tsv=None, command="gpuhmm merge"):
    """Merge the hits files of model shards into tables, models back in input-file order."""
    started = time.perf_counter()
    contents = [merge.load_hits(path) for path in hits_files]
    ranked = []
    if order is not None:
        shards = models.ModelShards.open(order)
        for path, content in zip(hits_files, contents):
            positions = shards.positions(shards.path / content["model_file"])
            if len(positions) != len(content["hits"]):
                raise GpuhmmError(path, f"holds {len(content['hits'])} models, its shard lists {len(positions)}")
            ranked += zip(positions, content["hits"])
        if len(ranked) != shards.models:
            raise GpuhmmError(shards.path, f"lists {shards.models} models but the hits files hold {len(ranked)}: a model shard is missing")
    else:
        ranked = list(enumerate(hits for content in contents for hits in content["hits"]))
    ranked.sort(key=lambda pair: pair[0])
    merged = [hits for _, hits in ranked]
    runs = [content["run"] for content in contents]
    footer = merge.hmmer_footer(command, runs[0]["models_file"] if runs else "-", runs[0]["sequences_file"] if runs else "-")
    merge.write_outputs(merged, {"tblout": tblout, "domtblout": domtblout, "pfamtblout": pfamtblout}, domains, footer)
    if summary or summary_tsv:
        stages = {}
        for content in contents:
            for stage in content["stages"]:
                stages[stage["name"]] = stages.get(stage["name"], 0.0) + stage["seconds"]
        stage_list = [{"name": name, "seconds": seconds} for name, seconds in stages.items()]
        stage_list.append({"name": "final merge", "seconds": time.perf_counter() - started})
        first = runs[0]
        merge.write_summary(summary, summary_tsv, {
            "program": "gpuhmm merge",
            "command": command,
            "backend": first["backend"],
            "cluster": first["cluster"],
            "models_file": first["models_file"],
            "sequences_file": first["sequences_file"],
            "sequences": first["sequences"],
            "residues": first["residues"],
            "Z": first["Z"],
            "model_shard_files": len(contents),
            "tasks": sum(run["tasks"] for run in runs),
            "cells": sum(run["cells"] for run in runs),
            "task_seconds": sum(run["task_seconds"] for run in runs),
            "filters": {name: sum(run["filters"].get(name, 0) for run in runs)
                        for name in dict.fromkeys(name for run in runs for name in run["filters"])},
            "models": merge.model_counts(merged),
            "stages": stage_list,
        })
    return merged


def _open_database(sequences, hmms, db_shards, cleanup, executor, read_ahead):
    """A makedb directory as it is, or a FASTA file sharded: in memory for workers in this
    process (perhaps read already by `read_ahead`), into a temporary database for a cluster's,
    with a shard for every worker at least."""
    wanted = seqdb.alphabet_name(hmms[0].alphabet) if hmms else None
    path = Path(sequences)
    if path.is_dir() or path.name == seqdb.MANIFEST:
        database = seqdb.SequenceDatabase.open(path)
        if wanted and database.alphabet_name != wanted:
            raise GpuhmmError(path, f"alphabet mismatch: the database is {database.alphabet_name}, the models are {wanted}")
        return database
    guessed = seqdb.guess_alphabet(path)
    if wanted and guessed and guessed != wanted:
        raise GpuhmmError(path, f"alphabet mismatch: the sequences look like {guessed}, the models are {wanted}")
    if executor.in_process:
        database = seqdb.makedb(path, None, db_shards, alphabet=wanted or guessed, read_ahead=read_ahead)
        cleanup.callback(seqdb.release, database)
        cleanup.callback(pipeline.resident_shards.release, database)
        return database
    workdir = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="gpuhmm-db-"))
    return seqdb.makedb(path, workdir, max(db_shards, executor.worker_count()), alphabet=wanted or guessed)


def gpu_stage_summary(stage_seconds):
    """Seconds per GPU-backend stage, summed over tasks, and the Viterbi and Forward kernels' TCUPS."""
    summary = {f"{name}_s": round(float(value), 4) for name, value in stage_seconds.items() if not name.endswith("_cells")}
    for stage in ("viterbi", "forward"):
        cells = int(stage_seconds.get(f"{stage}_cells", 0))
        kernel = float(stage_seconds.get(f"{stage}_kernel", 0.0))
        summary[f"{stage}_cells"] = cells
        summary[f"{stage}_tcups"] = round(cells / kernel / 1e12, 3) if kernel else None
    return summary
