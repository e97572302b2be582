"""The tasks a worker runs: one model group against one resident database shard.

On the CPU backend a task runs HMMER's whole pipeline through pyhmmer. On the GPU backend the
filter stages run on the GPU first (`engine.filters`), and pyhmmer's pipeline re-runs every
stage on the survivors only; since the GPU stages pass HMMER's set or more (exactly up to
Viterbi, with a margin at Forward), the hits are the same, and `hits.tophits` restates
their statistics as a search of the whole shard. With `--domaindef gpu` the survivors go to the
worker's tail queue, where the GPU finishes the pairs it can vouch for and the waiting task
threads the rest with pyhmmer (`worker.tail`).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import pyhmmer.plan7

from ..errors import GpuhmmError
from ..hits import tophits
from ..hits.text import hit_text, model_text
from ..messages import TaskResult
from . import tail
from .state import STATE, worker_name

log = logging.getLogger("gpuhmm")


def run_task(task, shared):
    """One model group against one resident database shard: per model its kept hits."""
    with STATE.running_task():
        return _run_task(task, shared)


def _run_task(task, shared):
    started, started_at, started_cpu_task = time.perf_counter(), time.time(), time.thread_time()
    database, settings, backend = shared.database, shared.pipeline, shared.backend
    # The shard first: a worker's first tasks load it while the models are configured ahead.
    shard = STATE.shards.get(database, task.shard, backend)
    models = [shared.models[position] for position in task.positions]
    pipeline = STATE.pipeline(database.alphabet, settings)
    filtered, finished = {}, {}  # by index in `models`: the GPU filters' outcome, the tail's result
    stage_seconds = {}
    if backend == "gpu" and settings.F1 < 1.0:
        # A model too long for the SSV kernel goes through pyhmmer's whole pipeline.
        held = [index for index, model in enumerate(models) if STATE.engine().holds(model.M)]
        held_models = [models[index] for index in held]
        prepared = STATE.models.filter_models(shared.search_key, [task.positions[i] for i in held], held_models)
        filtered = dict(zip(held, _filter_in_batches(shard, prepared, settings, stage_seconds, task.shard)))
    tail_span = None
    if filtered and shared.domaindef == "gpu":
        started_tail, started_cpu = time.perf_counter(), time.thread_time()
        tail_started = time.time()
        found, queue_stats = tail.finish(
            STATE.tail_queue(),
            shard,
            held_models,
            prepared,
            list(filtered.values()),
            pipeline,
            (database.alphabet, settings),
        )
        finished = dict(zip(filtered, found))
        tail_span = (tail_started, time.time())
        for name, value in queue_stats.items():
            _add(stage_seconds, name, value)
        _add(stage_seconds, "tail", time.perf_counter() - started_tail)
        _add(stage_seconds, "tail_host_cpu", time.thread_time() - started_cpu)
    hits, counts = [], {}
    searched = shard.piece(task.piece, task.pieces) if len(filtered) < len(models) else None
    for index, model in enumerate(models):
        if index not in filtered:
            found = pipeline.search_hmm(model, searched)
        else:
            outcome = filtered[index]
            started_tail, started_cpu = time.perf_counter(), time.thread_time()
            if index not in finished:
                of_survivors, on_gpu, passed = pipeline.search_hmm(model, shard.subset(outcome.survivors)), 0, 0
            else:
                of_survivors, on_gpu, passed = finished[index]
            _add(stage_seconds, "pairs_finished_on_gpu", on_gpu)
            _add(stage_seconds, "pairs_to_pyhmmer", len(outcome.survivors) - on_gpu)
            found = tophits.counting_whole_shard(
                of_survivors,
                shard.sequences,
                shard.residues,
                known={"n_past_msv": len(outcome.passed_msv), "n_past_bias": len(outcome.passed_bias)},
                uncounted={"n_past_vit": len(outcome.stopped_after_viterbi) + on_gpu, "n_past_fwd": passed},
            )
            _add(stage_seconds, "cpu_tail", time.perf_counter() - started_tail)
            # CPU time apart from wall time: the tail's own cost, without waits for a busy core.
            _add(stage_seconds, "cpu_tail_cpu", time.thread_time() - started_cpu)
        among = shard.file_positions_among(filtered[index].survivors) if index in filtered else shard.file_position
        kept, model_counts = tophits.as_hmmsearch_keeps(found, among)
        pipeline.clear()
        hits.append(kept)
        for name, count in model_counts.items():
            counts[name] = counts.get(name, 0) + count
    cpu_seconds = time.thread_time() - started_cpu_task
    return TaskResult(
        task,
        tuple(hits),
        time.perf_counter() - started,
        cpu_seconds,
        counts,
        stage_seconds,
        worker_name(),
        (started_at, time.time()),
        tail_span,
    )


def _add(totals, name, value):
    totals[name] = totals.get(name, 0) + value


def scan_filter_task(task, shared):
    """The GPU filters of one model group against one shard: per model its `FilterOutcome`, the
    sequences as block positions."""
    shard = STATE.shards.get(shared.database, task.shard, shared.backend)
    models = [shared.models[p] for p in task.positions]
    prepared = STATE.models.filter_models(shared.search_key, task.positions, models)
    return task, _filter_in_batches(shard, prepared, shared.pipeline, {}, task.shard)


def scan_task(piece, shared):
    """Each sequence of one piece of a shard against its models, with pyhmmer's scan pipeline.
    Returns (file position, TopHits) pairs."""
    shard = STATE.shards.get(shared.database, piece.shard, shared.backend)
    positions = np.arange(piece.piece, shard.sequences, piece.pieces)
    profile = STATE.scan_profiles(shared.search_key, shared.models)
    if piece.candidates is None:
        models_of = {position: range(len(shared.models)) for position in positions.tolist()}
    else:
        models_of = {position: [] for position in positions.tolist()}
        for model, survivors in sorted(piece.candidates, key=lambda pair: pair[0]):
            for position in survivors[survivors % piece.pieces == piece.piece].tolist():
                models_of[position].append(model)
    pipeline = STATE.pipeline(shared.database.alphabet, shared.pipeline)
    nodes = sum(model.M for model in shared.models)
    file_position = {}
    if piece.filter_counts is not None:
        for index, model in enumerate(shared.models):
            file_position.setdefault(model_text(model)[0], index + 1)
    found = []
    for position, sequence in zip(positions.tolist(), shard.subset(positions)):
        block = pyhmmer.plan7.OptimizedProfileBlock(shared.database.alphabet, [profile(m) for m in models_of[position]])
        hits = pipeline.scan_seq(sequence, block)
        if piece.filter_counts is not None:
            # pyhmmer met the sequence's candidates only; hmmscan's statistics count every model.
            counts = {name: int(count[position]) for name, count in piece.filter_counts.items()}
            hits = tophits.counting_every_model(
                hits, len(shared.models), nodes, counts, lambda hit: file_position[hit_text(hit)[0]]
            )
        found.append((shard.source_index(position), hits))
        pipeline.clear()
    return found


def _filter_in_batches(shard, models, settings, timings, shard_index):
    """The GPU filters of `models` (FilterModels) against `shard`. A batch the GPU has no memory
    for (CuPy's OutOfMemoryError is a MemoryError) is split in two and each half retried, down
    to one model; the filters' results do not depend on how the models are batched."""
    try:
        return shard.filter(STATE.engine(), models, settings, timings, STATE.sieve_slots)
    except MemoryError as error:
        if len(models) == 1:
            raise GpuhmmError(
                f"database shard {shard_index}",
                f"the GPU ran out of memory filtering model {models[0].msv.name} against it ({error}); "
                f"split the database into more shards (--db-shards)",
            ) from error
        half = len(models) // 2
        log.warning(
            "GPU out of memory filtering %d models against database shard %d (%s); "
            "retrying them as batches of %d and %d",
            len(models),
            shard_index,
            error,
            half,
            len(models) - half,
        )
        return _filter_in_batches(shard, models[:half], settings, timings, shard_index) + _filter_in_batches(
            shard, models[half:], settings, timings, shard_index
        )
