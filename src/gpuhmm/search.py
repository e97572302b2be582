"""The client side of a search: plan (model group × database shard) tasks, run them on an
executor, and gather per model the hits of every shard.

On the CPU backend every task runs HMMER's whole pipeline on one database shard; on the GPU
backend the filter stages run on the GPU first and pyhmmer finishes the survivors (`worker`).
Either way each shard keeps the hits hmmsearch would keep (`hits.tophits`), and its
statistics count the whole shard. Z is the user's `-Z` or, automatic, the shard's count, which
`TopHits.merge` sums into the whole database's. The executor is passed in (`cluster`), which
keeps this module free of Dask.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import numpy as np
from pyhmmer.errors import MissingCutoffs

from .db.models import balance_by_length, guided_groups, lacking_cutoffs
from .hits import tophits
from .hits.text import label
from .messages import PipelineSettings, ScanPiece, SearchTask, SharedContext
from .worker import run_task, scan_filter_task, scan_task

log = logging.getLogger("gpuhmm")


@dataclasses.dataclass
class SearchResult:
    """Per model (in the order given), the TopHits of every database shard, plus timings."""

    hits_by_model: list
    task_seconds: float = 0.0
    wall_seconds: float = 0.0
    cells: int = 0
    tasks: int = 0
    filter_counts: dict = dataclasses.field(default_factory=dict)
    stage_seconds: dict = dataclasses.field(default_factory=dict)
    #: Per worker: tasks, seconds busy, and the seconds from the search's start to its first
    #: task's start and to its last task's end (a late first start is a slow worker start-up).
    workers: dict = dataclasses.field(default_factory=dict)
    #: When the first pairs were queued for the tail and the last finished there (Unix seconds;
    #: GPU backend, `--domaindef gpu`), or None.
    tail_window: tuple | None = None

    def extend(self, later, after):
        """Adds the `later` search of more shards, begun `after` seconds past this one's start."""
        for hits, more in zip(self.hits_by_model, later.hits_by_model):
            hits += more
        self.task_seconds += later.task_seconds
        self.cells += later.cells
        self.tasks += later.tasks
        for mine, theirs in ((self.filter_counts, later.filter_counts), (self.stage_seconds, later.stage_seconds)):
            for name, value in theirs.items():
                mine[name] = mine.get(name, 0) + value
        for name, worker in later.workers.items():
            first, last = (round(worker[key] + after, 3) for key in ("first_start_s", "last_end_s"))
            seen = self.workers.setdefault(name, dict(worker, tasks=0, busy_s=0.0, busy_cpu_s=0.0, first_start_s=first))
            for key in ("tasks", "busy_s", "busy_cpu_s"):
                seen[key] = round(seen[key] + worker[key], 3)
            seen["last_end_s"] = max(seen["last_end_s"], last)
        if later.tail_window is not None:
            window = self.tail_window or later.tail_window
            self.tail_window = (min(window[0], later.tail_window[0]), max(window[1], later.tail_window[1]))


def plan_tasks(models, database, model_groups, slots, backend):
    """Tasks covering every (model, non-empty shard) pair once, largest first.

    `model_groups` equal groups balanced by length, or None for groups that shrink towards
    the end of the run (guided scheduling over `slots` workers). On the CPU backend, fewer
    tasks than slots (a few models) are each cut into pieces of the shard, so that every slot
    has one.
    """
    lengths = [model.M for model in models]
    shards = [index for index, info in enumerate(database.shards) if info.sequences]
    if model_groups:
        groups = [group for group in balance_by_length(lengths, model_groups) if group]
    else:
        groups = guided_groups(lengths, max(1, -(-slots // len(shards))))
    tasks = []
    for group in groups:
        nodes = sum(lengths[position] for position in group)
        for shard in shards:
            tasks.append(SearchTask(tuple(group), shard, nodes * database.shards[shard].residues))
    if backend == "cpu" and tasks and len(tasks) < slots:
        pieces = -(-slots // len(tasks))
        tasks = [
            dataclasses.replace(task, cells=task.cells // cut, piece=piece, pieces=cut)
            for task in tasks
            for cut in [min(pieces, database.shards[task.shard].sequences)]
            for piece in range(cut)
        ]
    tasks.sort(key=lambda task: -task.cells)
    return tasks


def run_search(
    models, database, options, executor, model_groups=None, slots=1, backend="cpu", domaindef="gpu", label="search"
):
    """Search `models` against every shard of `database` on `executor`.

    `executor.run(function, items, cells, shards, shared, label)` must yield each
    function(item, shared) as it completes; `label` opens its progress lines.
    """
    started, started_at = time.perf_counter(), time.time()
    tasks = plan_tasks(models, database, model_groups, slots, backend)
    per_model = [{} for _ in models]  # (shard, piece) → hits
    result = SearchResult(hits_by_model=per_model, tasks=len(tasks))
    shared = SharedContext.of(models, database, PipelineSettings.of(options), backend, domaindef)
    for outcome in executor.run(
        run_task,
        tasks,
        cells=[task.cells for task in tasks],
        shards=[task.shard for task in tasks],
        shared=shared,
        label=label,
    ):
        for position, hits in zip(outcome.task.positions, outcome.hits):
            per_model[position][outcome.task.shard, outcome.task.piece] = tophits.attached(hits, models[position])
        for name, count in outcome.filter_counts.items():
            result.filter_counts[name] = result.filter_counts.get(name, 0) + count
        for name, value in outcome.stage_seconds.items():
            result.stage_seconds[name] = result.stage_seconds.get(name, 0) + value
        result.task_seconds += outcome.seconds
        result.cells += outcome.task.cells
        first, last = (round(moment - started_at, 3) for moment in outcome.span)
        worker = result.workers.setdefault(
            outcome.worker, {"tasks": 0, "busy_s": 0.0, "busy_cpu_s": 0.0, "first_start_s": first, "last_end_s": last}
        )
        worker["tasks"] += 1
        worker["busy_s"] = round(worker["busy_s"] + outcome.seconds, 3)
        worker["busy_cpu_s"] = round(worker["busy_cpu_s"] + outcome.cpu_seconds, 3)
        worker["first_start_s"] = min(worker["first_start_s"], first)
        worker["last_end_s"] = max(worker["last_end_s"], last)
        if outcome.tail_span is not None:
            first, last = outcome.tail_span
            window = result.tail_window or (first, last)
            result.tail_window = (min(window[0], first), max(window[1], last))
    result.hits_by_model = [[pieces[key] for key in sorted(pieces)] for pieces in per_model]
    result.wall_seconds = time.perf_counter() - started
    for name, worker in sorted(result.workers.items()):
        log.info(
            "worker %s: %d tasks, first started at %.1fs, last ended at %.1fs, %.0f task-seconds (%.0f on a CPU)",
            name,
            worker["tasks"],
            worker["first_start_s"],
            worker["last_end_s"],
            worker["busy_s"],
            worker["busy_cpu_s"],
        )
    return result


def run_scan(models, database, options, executor, slots=1, backend="cpu"):
    """hmmscan: per sequence of `database`, in file order, the TopHits of `models` against it,
    with Z the number of models (or -Z) and each sequence's own domZ.

    The work is still models × shards: on the GPU backend the filters of every (model group,
    shard) task run first, as a search's do, and give each sequence the models that pass
    them; pyhmmer's scan pipeline then runs each sequence against those models only (they
    include every model HMMER's filters pass), and `tophits.counting_every_model` restates its
    hits as hmmscan's over every model. On the CPU backend each sequence meets every model in
    pyhmmer's own pipeline, which counts Z as hmmscan does."""
    pipeline = PipelineSettings.of(options)
    shared = SharedContext.of(models, database, pipeline, backend)
    shards = [index for index, info in enumerate(database.shards) if info.sequences]
    candidates = dict.fromkeys(shards)  # shard → (model position, block positions) pairs, or None: all
    counts = dict.fromkeys(shards)  # shard → models past each GPU stage, per sequence
    if backend == "gpu" and pipeline.F1 < 1.0:
        lacking = set(lacking_cutoffs(models, pipeline.bit_cutoffs))
        candidates = {shard: [] for shard in shards}
        counts = {
            shard: {
                name: np.zeros(database.shards[shard].sequences, dtype=np.int64)
                for name in ("n_past_msv", "n_past_bias", "n_past_vit")
            }
            for shard in shards
        }
        tasks = plan_tasks(models, database, None, slots, backend)
        for task, outcomes in executor.run(
            scan_filter_task,
            tasks,
            cells=[task.cells for task in tasks],
            shards=[task.shard for task in tasks],
            shared=shared,
        ):
            for position, outcome in zip(task.positions, outcomes):
                if position in lacking and len(outcome.passed_bias):
                    raise MissingCutoffs(label(models[position]))  # as pyhmmer's scan pipeline would
                candidates[task.shard].append((position, outcome.survivors))
                for name, passed in (
                    ("n_past_msv", outcome.passed_msv),
                    ("n_past_bias", outcome.passed_bias),
                    ("n_past_vit", outcome.stopped_after_viterbi),
                ):
                    counts[task.shard][name][passed] += 1
    # Several pieces per shard, so that every thread has sequences to scan.
    pieces = max(1, -(-2 * slots // max(1, len(shards))))
    work = [
        ScanPiece(shard, piece, pieces, candidates[shard], counts[shard]) for shard in shards for piece in range(pieces)
    ]
    nodes = sum(model.M for model in models)
    per_sequence = []
    for found in executor.run(
        scan_task,
        work,
        cells=[nodes * database.shards[w.shard].residues // pieces for w in work],
        shards=[w.shard for w in work],
        shared=shared,
    ):
        per_sequence += found
    per_sequence.sort(key=lambda pair: pair[0])
    return [hits for _, hits in per_sequence]
