"""The search engine: (model group × database shard) tasks, each finished by pyhmmer's pipeline.

On the CPU backend every task runs HMMER's whole pipeline (MSV → bias → Viterbi → Forward →
domains) on one database shard. On the GPU backend the shard's filter stages (SSV/MSV, the
bias filter, the Viterbi filter and the Forward filter, `prefilter`) run on the GPU first, and
pyhmmer's pipeline re-runs every stage on the survivors only; since the GPU stages pass HMMER's
set or more (exactly up to Viterbi, with a margin at Forward), the hits are the same. Either
way each shard keeps the hits hmmsearch would keep (see `_tophits`), and its statistics
count the whole shard. Z is the user's `-Z` or, automatic, the shard's count, which
`TopHits.merge` sums into the whole database's, so the merged shards are exactly hmmsearch's
result. The executor that runs the tasks is passed in (see `cluster`), which keeps this
module free of Dask.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import logging
import os
import socket
import threading
import time
import uuid

import numpy as np
import pyhmmer.plan7

from . import _tophits, fwdfilter, msv, prefilter, seqdb, shuffle, vitfilter
from .errors import GpuhmmError
from .models import ModelsOnDisk, balance_by_length, guided_groups, shortest_first

log = logging.getLogger("gpuhmm")

@dataclasses.dataclass(frozen=True)
class SearchTask:
    """One unit of work: some models (by position) against one database shard."""

    positions: tuple
    shard: int
    cells: int  # Σ M × shard residues: the dynamic-programming cells the filters cover


@dataclasses.dataclass(frozen=True)
class TaskResult:
    task: SearchTask
    hits: tuple  # per position in task.positions: its kept hits' state (`_tophits.as_hmmsearch_keeps`)
    seconds: float
    cpu_seconds: float  # the task's thread on a CPU: beside `seconds`, how long it waited (GPU, GIL, cores)
    filter_counts: dict  # hmmsearch's pipeline statistics, summed over the task's models
    stage_seconds: dict  # GPU filter stages and the CPU tail (GPU backend), plus Viterbi cells
    worker: str  # host:process id
    span: tuple  # (start, end), Unix seconds


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


def resolve_backend(requested, cluster_gpus=0):
    """The backend a run uses: "gpu" where asked for (or, with "auto", where a GPU is usable).

    With a local cluster of several GPUs (`cluster_gpus`), CUDA is its workers' alone: this
    process only checks that CuPy is installed, and each worker finds its GPU (`_gpu_engine`).
    Loading CuPy and counting the devices here took 1.9 s of this process's interpreter lock
    while Dask started the workers (4 × H200): dask_cuda's import took 1.1 s instead of 0.1."""
    if requested == "cpu":
        return "cpu"
    problem = _cupy_problem() if cluster_gpus > 1 else _gpu_problem()
    if problem is None:
        return "gpu"
    if requested == "gpu":
        raise GpuhmmError("--backend gpu", problem)
    return "cpu"


def _gpu_problem():
    """Why the GPU backend cannot run here, or None when it can."""
    try:
        from . import gpu
    except Exception as error:  # no CuPy, or a CuPy that cannot load CUDA
        return f"CuPy with a CUDA driver is needed ({type(error).__name__}: {error}); install gpuhmm[gpu]"
    if gpu.device_count() == 0:
        return "no CUDA GPU is visible to this process"
    return None


def _cupy_problem():
    """Why CuPy cannot be imported, found without importing it; None when it is installed."""
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is needed for the GPU backend (no module named 'cupy'); install gpuhmm[gpu]"
    return None


def plan_tasks(models, database, model_groups, slots):
    """Tasks covering every (model, non-empty shard) pair once, largest first.

    `model_groups` equal groups balanced by length, or None for groups that shrink towards
    the end of the run (guided scheduling over `slots` workers).
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
    tasks.sort(key=lambda task: -task.cells)
    return tasks


def search(models, database, options, executor, model_groups=None, slots=1, backend="cpu"):
    """Search `models` against every shard of `database` on `executor`.

    `executor.run(function, items, cells, shards, shared)` must yield each function(item, shared)
    as it completes.
    """
    started, started_at = time.perf_counter(), time.time()
    tasks = plan_tasks(models, database, model_groups, slots)
    arguments = options.pipeline_arguments()
    per_model = [[None] * len(database.shards) for _ in models]
    result = SearchResult(hits_by_model=per_model, tasks=len(tasks))
    shared = SharedContext.of(models, database, arguments, backend)
    for outcome in executor.run(run_task, tasks, cells=[task.cells for task in tasks],
                                shards=[task.shard for task in tasks], shared=shared):
        for position, hits in zip(outcome.task.positions, outcome.hits):
            per_model[position][outcome.task.shard] = _tophits.attached(hits, models[position])
        for name, count in outcome.filter_counts.items():
            result.filter_counts[name] = result.filter_counts.get(name, 0) + count
        for name, value in outcome.stage_seconds.items():
            result.stage_seconds[name] = result.stage_seconds.get(name, 0) + value
        result.task_seconds += outcome.seconds
        result.cells += outcome.task.cells
        first, last = (round(moment - started_at, 3) for moment in outcome.span)
        worker = result.workers.setdefault(
            outcome.worker, {"tasks": 0, "busy_s": 0.0, "busy_cpu_s": 0.0, "first_start_s": first, "last_end_s": last})
        worker["tasks"] += 1
        worker["busy_s"] = round(worker["busy_s"] + outcome.seconds, 3)
        worker["busy_cpu_s"] = round(worker["busy_cpu_s"] + outcome.cpu_seconds, 3)
        worker["first_start_s"] = min(worker["first_start_s"], first)
        worker["last_end_s"] = max(worker["last_end_s"], last)
    result.hits_by_model = [[hits for hits in shards if hits is not None] for shards in per_model]
    result.wall_seconds = time.perf_counter() - started
    for name, worker in sorted(result.workers.items()):
        log.info("worker %s: %d tasks, first started at %.1fs, last ended at %.1fs, %.0f task-seconds (%.0f on a CPU)",
                 name, worker["tasks"], worker["first_start_s"], worker["last_end_s"], worker["busy_s"], worker["busy_cpu_s"])
    return result


def significance(models, hits_by_model, database, count, seed, backend):
    """The shuffle significance rows (`shuffle`) of every reported hit, scored on this process's
    GPU engine, or on its numpy reference (the CPU reference) on the CPU backend."""
    engine = _gpu_engine() if backend == "gpu" else prefilter.ReferenceEngine()
    positions = [position for position, model_hits in enumerate(hits_by_model) if len(model_hits.reported)]
    profiles = vitfilter.viterbi_profiles([models[p] for p in positions], pyhmmer.plan7.Background(database.alphabet))
    assessed = [(position, hits_by_model[position], profile) for position, profile in zip(positions, profiles)]
    wanted = {(hit.name, hit.length) for model_hits in hits_by_model for hit in model_hits.reported}
    found = {}
    for index in range(len(database.shards)):
        shard = database.load_shard(index)
        lengths, source_index = shard.lengths.tolist(), shard.source_index.tolist()
        for position, name in enumerate(shard.names):
            key = (name, lengths[position])
            # The first in file order, as `_ResidentShard.file_position` takes.
            if key in wanted and (key not in found or source_index[position] < found[key][1]):
                found[key] = (shard.residues[shard.offsets[position]:shard.offsets[position + 1]], source_index[position])
    return shuffle.significance_rows(engine, assessed, lambda name, length: found[(name, length)],
                                     count, seed, database.alphabet)


def scan(models, database, options, executor, slots=1, backend="cpu"):
    """hmmscan: per sequence of `database`, in file order, the TopHits of `models` against it,
    with Z the number of models (or -Z) and each sequence's own domZ.

    The work is still models × shards: on the GPU backend the filters of every (model group,
    shard) task run first, as a search's do, and give each sequence the models that pass
    them; pyhmmer's scan pipeline then runs each sequence against those models only (they
    include every model HMMER's filters pass, and Z is fixed, so the rows are hmmscan's). On
    the CPU backend each sequence meets every model in pyhmmer's own pipeline."""
    arguments = dict(options.pipeline_arguments(), Z=options.Z or len(models))
    shared = SharedContext.of(models, database, arguments, backend)
    shards = [index for index, info in enumerate(database.shards) if info.sequences]
    candidates = dict.fromkeys(shards)  # shard → (model position, block positions) pairs, or None: all
    if backend == "gpu" and arguments["F1"] < 1.0:
        candidates = {shard: [] for shard in shards}
        tasks = plan_tasks(models, database, None, slots)
        for task, survivors in executor.run(scan_filter_task, tasks, cells=[task.cells for task in tasks],
                                            shards=[task.shard for task in tasks], shared=shared):
            candidates[task.shard] += zip(task.positions, survivors)
    # Several pieces per shard, so that every thread has sequences to scan.
    pieces = max(1, -(-2 * slots // max(1, len(shards))))
    work = [ScanPiece(shard, piece, pieces, candidates[shard]) for shard in shards for piece in range(pieces)]
    nodes = sum(model.M for model in models)
    per_sequence = []
    for found in executor.run(scan_task, work, cells=[nodes * database.shards[w.shard].residues // pieces for w in work],
                              shards=[w.shard for w in work], shared=shared):
        per_sequence += found
    per_sequence.sort(key=lambda pair: pair[0])
    return [hits for _, hits in per_sequence]


@dataclasses.dataclass(frozen=True)
class ScanPiece:
    """Every `pieces`-th sequence of a shard from `piece` on, and the models (by position) each
    sequence's filters passed, or None for all of them."""

    shard: int
    piece: int
    pieces: int
    candidates: list | None


def scan_filter_task(task, shared):
    """Runs on a worker: the GPU filters of one model group against one shard; per model, the
    block positions of the sequences that pass them."""
    shard = resident_shards.get(shared.database, task.shard, shared.backend)
    prepared = _filter_models(shared.search_key, task.positions, [shared.models[p] for p in task.positions])
    filtered = _filter_in_batches(shard, prepared, shared.arguments, {}, task.shard)
    return task, [survivors for survivors, _, _ in filtered]


def scan_task(piece, shared):
    """Runs on a worker: each sequence of one piece of a shard against its models, with
    pyhmmer's scan pipeline. Returns (file position, TopHits) pairs."""
    shard = resident_shards.get(shared.database, piece.shard, shared.backend)
    positions = np.arange(piece.piece, shard.sequences, piece.pieces)
    profile = _thread_profiles(shared.search_key, shared.models)
    if piece.candidates is None:
        models_of = {position: range(len(shared.models)) for position in positions.tolist()}
    else:
        models_of = {position: [] for position in positions.tolist()}
        for model, survivors in sorted(piece.candidates, key=lambda pair: pair[0]):
            for position in survivors[survivors % piece.pieces == piece.piece].tolist():
                models_of[position].append(model)
    pipeline = _thread_pipeline(shared.database.alphabet, shared.arguments)
    found = []
    for position, sequence in zip(positions.tolist(), shard.subset(positions)):
        block = pyhmmer.plan7.OptimizedProfileBlock(shared.database.alphabet, [profile(m) for m in models_of[position]])
        found.append((shard.source_index(position), pipeline.scan_seq(sequence, block)))
        pipeline.clear()
    return found


@dataclasses.dataclass(frozen=True)
class SharedContext:
    """What every task of a search needs, sent to each worker once."""

    search_key: str  # tells one search's configured models from another's on a long-lived worker
    models: tuple | ModelsOnDisk
    database: object
    arguments: dict
    backend: str

    @classmethod
    def of(cls, models, database, arguments, backend):
        if isinstance(models, ModelsOnDisk):
            return cls(models.key, models, database, arguments, backend)
        return cls(uuid.uuid4().hex, tuple(models), database, arguments, backend)


def run_task(task, shared):
    """Runs on a worker: one model group against one resident database shard."""
    started, started_at, started_cpu_task = time.perf_counter(), time.time(), time.thread_time()
    database, arguments, backend = shared.database, shared.arguments, shared.backend
    # The shard first: a worker's first tasks load it while `prepare_worker` reads the models.
    shard = resident_shards.get(database, task.shard, backend)
    models = [shared.models[position] for position in task.positions]
    pipeline = _thread_pipeline(database.alphabet, arguments)
    filtered = None
    stage_seconds = {}
    if backend == "gpu" and arguments["F1"] < 1.0:
        prepared = _filter_models(shared.search_key, task.positions, models)
        filtered = _filter_in_batches(shard, prepared, arguments, stage_seconds, task.shard)
    hits, counts = [], {}
    for index, model in enumerate(models):
        if filtered is None:
            found = pipeline.search_hmm(model, shard.block)
        else:
            survivors, known, uncounted = filtered[index]
            started_tail, started_cpu = time.perf_counter(), time.thread_time()
            found = _tophits.counting_whole_shard(
                pipeline.search_hmm(model, shard.subset(survivors)), shard.sequences, shard.residues, known, uncounted)
            stage_seconds["cpu_tail"] = stage_seconds.get("cpu_tail", 0.0) + time.perf_counter() - started_tail
            # CPU time apart from wall time: the tail's own cost, without waits for a busy core.
            stage_seconds["cpu_tail_cpu"] = stage_seconds.get("cpu_tail_cpu", 0.0) + time.thread_time() - started_cpu
        kept, model_counts = _tophits.as_hmmsearch_keeps(found, shard.file_position)
        pipeline.clear()
        hits.append(kept)
        for name, count in model_counts.items():
            counts[name] = counts.get(name, 0) + count
    cpu_seconds = time.thread_time() - started_cpu_task
    return TaskResult(task, tuple(hits), time.perf_counter() - started, cpu_seconds, counts, stage_seconds,
                      _worker_name(), (started_at, time.time()))


def _filter_in_batches(shard, models, arguments, timings, shard_index):
    """The GPU filters of `models` (FilterModels) against `shard`. A batch the GPU has no memory
    for (CuPy's OutOfMemoryError is a MemoryError) is split in two and each half retried, down
    to one model; the filters' results do not depend on how the models are batched."""
    try:
        return shard.filter(models, arguments, timings)
    except MemoryError as error:
        if len(models) == 1:
            raise GpuhmmError(
                f"database shard {shard_index}",
                f"the GPU ran out of memory filtering model {models[0].msv.name} against it ({error}); "
                f"split the database into more shards (--db-shards)") from error
        half = len(models) // 2
        log.warning("GPU out of memory filtering %d models against database shard %d (%s); "
                    "retrying them as batches of %d and %d", len(models), shard_index, error, half, len(models) - half)
        return (_filter_in_batches(shard, models[:half], arguments, timings, shard_index)
                + _filter_in_batches(shard, models[half:], arguments, timings, shard_index))


def _worker_name():
    """host:process id, asked per task: workers forked from a fork server that imported this
    module share its import-time process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


_per_thread = threading.local()


def _thread_pipeline(alphabet, arguments):
    """One pyhmmer Pipeline per worker thread and option set, reused across tasks.

    A new Pipeline allocates its background and DP matrices; at a few ms each, that would
    make fine-grained tasks (the ones that balance well) cost more than they gain.
    """
    key = (str(alphabet), tuple(sorted(arguments.items())))
    cache = _per_thread.__dict__.setdefault("pipelines", {})
    if key not in cache:
        cache[key] = pyhmmer.plan7.Pipeline(alphabet, **arguments)
    return cache[key]


class _ResidentShard:
    """A shard as a worker keeps it: in database-file order, as hmmsearch reads targets.

    File order matters: see `_tophits`. `file_position` finds a hit's sequence by name and
    length; where a shard holds several such sequences it takes the first, the rule that
    keeps a hit whenever any of them would. The pyhmmer block of the whole shard (for the CPU
    backend) and the name index are built on first use: the GPU backend gives pyhmmer only
    each model's survivors, so its first kernels need not wait for them. For the GPU backend
    the shard also keeps its residues laid out for the filter kernels, built on first use.
    """

    def __init__(self, shard, alphabet):
        self._shard = shard
        self._alphabet = alphabet
        self._file_order = np.argsort(shard.source_index, kind="stable")
        self._block_position = np.empty(len(self._file_order), dtype=np.int64)
        self._block_position[self._file_order] = np.arange(len(self._file_order))
        self.sequences = len(self._file_order)
        self.residues = int(shard.offsets[-1])
        self._filter_shard = None
        self._filter_lock = threading.Lock()
        self._block = None
        self._positions = None
        self._lazy_lock = threading.Lock()

    def footprint(self):
        """Bytes this shard holds: its residues, what the filters laid out from them (the
        device holds about as much again) and the pyhmmer sequences of the whole shard."""
        total = self._shard.residues.nbytes + self._shard.offsets.nbytes
        if self._filter_shard is not None:
            total += self._filter_shard.footprint()
        if self._block is not None:
            total += self.residues + PYHMMER_SEQUENCE_BYTES * self.sequences
        return total

    @property
    def block(self):
        with self._lazy_lock:
            if self._block is None:
                self._block = self._shard.to_block(self._alphabet, self._file_order)
            return self._block

    def source_index(self, position):
        """The file position of the sequence at block `position`."""
        return int(self._shard.source_index[self._file_order[position]])

    def subset(self, positions):
        """The sequences at block `positions` (ascending: file order) as a pyhmmer block."""
        return self._shard.to_block(self._alphabet, self._file_order[positions])

    def file_position(self, hit):
        with self._lazy_lock:
            if self._positions is None:
                self._positions = seqdb.FirstPositions(self._shard)
        return self._positions.find(hit.name, hit.length)

    def filter(self, models, arguments, timings):
        """Per model (FilterModels): the block positions (file order) of the sequences past the
        GPU's filters; HMMER's counts past MSV and bias for the whole shard; and the sequences
        past Viterbi that pyhmmer will not see, to add to its count."""
        with self._filter_lock:
            if self._filter_shard is None:
                self._filter_shard = prefilter.FilterShard.build(self._shard.residues, self._shard.offsets, self._alphabet)
        results = prefilter.filter_stages(
            _gpu_engine(), [m.msv for m in models], [m.viterbi for m in models], [m.forward for m in models],
            pyhmmer.plan7.Background(self._alphabet).residue_frequencies, self._filter_shard,
            arguments["F1"], arguments["F2"], arguments["F3"], arguments["bias_filter"], timings, _sieve_slots)
        return [
            (np.sort(self._block_position[r.survivors]), {"n_past_msv": r.passed_msv, "n_past_bias": r.passed_bias},
             {"n_past_vit": r.stopped_after_viterbi})
            for r in results
        ]


@dataclasses.dataclass(frozen=True)
class FilterModel:
    """One model as the GPU filters take it, configured as hmmsearch configures it."""

    msv: msv.MsvModel
    viterbi: vitfilter.ViterbiProfile
    forward: fwdfilter.ForwardProfile


#: Per search (the latest few), the models a worker has configured, by position: every shard's
#: tasks share them, and with them the tables the kernels read (see `_memo.memoized`).
_configured = collections.OrderedDict()
_configured_lock = threading.Condition()  # notified as models are configured
_CONFIGURED_SEARCHES = 2
_configuring_ahead = {}  # search key → threading.Event, set once `prepare_worker` is done
#: Models configured ahead at a time: small enough that the first tasks wait little.
_AHEAD_BATCH = 64


def _filter_models(search_key, positions, models):
    ahead = _configuring_ahead.get(search_key)
    if ahead is not None:
        # The worker is configuring every model, shortest first (`prepare_worker`): a task waits
        # for its own models only, so the GPU starts on the first groups while the rest follow.
        with _configured_lock:
            _configured_lock.wait_for(
                lambda: ahead.is_set() or all(p in _configured.get(search_key, ()) for p in positions))
    return _configure(search_key, positions, models)


def _configure(search_key, positions, models):
    with _configured_lock:
        if search_key not in _configured:
            _configured[search_key] = {}
            while len(_configured) > _CONFIGURED_SEARCHES:
                _configuring_ahead.pop(_configured.popitem(last=False)[0], None)
        known = _configured[search_key]
        missing = [index for index, position in enumerate(positions) if position not in known]
    if missing:
        hmms = [models[index] for index in missing]
        background = pyhmmer.plan7.Background(hmms[0].alphabet)
        written = vitfilter.configured(hmms, background)
        msv_models = msv.msv_models(hmms, [optimized for optimized, _ in written])
        profiles = vitfilter.viterbi_profiles(hmms, background, written)
        forward = [fwdfilter.ForwardProfile.from_h3p(data, hmm) for hmm, (_, data) in zip(hmms, written)]
        with _configured_lock:
            for index, *parts in zip(missing, msv_models, profiles, forward):
                known.setdefault(positions[index], FilterModel(*parts))
            _configured_lock.notify_all()
    return [known[position] for position in positions]


#: Per search (the latest few), the OptimizedProfiles a worker has configured for a scan, by
#: model position: only the models some sequence of the worker's pieces needs.
_profiles = collections.OrderedDict()


def _thread_profiles(search_key, models):
    """profile(m): this thread's copy of model m's OptimizedProfile (`msv.configured_profile`,
    as hmmscan reads it from a pressed file). A scan reconfigures each profile for the length
    of the sequence at hand, so threads cannot share one (hmmscan's threads each read their
    own); the worker configures each model once, and each thread copies it."""
    with _configured_lock:
        if search_key not in _profiles:
            _profiles[search_key] = {}
            while len(_profiles) > _CONFIGURED_SEARCHES:
                _profiles.popitem(last=False)
        configured = _profiles[search_key]
    copies = _per_thread.__dict__.setdefault("profiles", {})
    if search_key not in copies:
        copies.clear()
        copies[search_key] = {}
    mine = copies[search_key]
    background = pyhmmer.plan7.Background(models[0].alphabet)

    def profile(position):
        if position not in mine:
            if position not in configured:
                configured.setdefault(position, msv.configured_profile(models[position], background))
            mine[position] = configured[position].copy()
        return mine[position]

    return profile


#: What a pyhmmer DigitalSequence holds beside its residues (name, header, pointers), roughly.
PYHMMER_SEQUENCE_BYTES = 256

_gpu_lock = threading.Lock()
_gpu = []


def _gpu_engine():
    """One GPU engine per process, shared by the worker's threads (each issues its calls on a
    stream of its own), so one task's host work and pyhmmer tail run while another's kernels run."""
    with _gpu_lock:
        if not _gpu:
            problem = _gpu_problem()
            if problem is not None:
                raise GpuhmmError(f"--backend gpu on {_worker_name()}", problem)
            from .gpu import GpuEngine

            _gpu.append(GpuEngine())
        return _gpu[0]


class ResidentShards:
    """The database shards a worker keeps, for every model group that needs them: in its memory
    and, on the GPU backend, on its device (a shard's device data lives as long as the shard
    does). Least recently used shards go first once their footprint passes `budget` bytes; one
    that a task still uses stays until that task ends. Keyed by checksum as well as path, so a
    rebuilt database is never served stale."""

    def __init__(self, budget=None):
        self.budget = budget  # bytes; None: half the device's memory (GPU) or the host's (CPU)
        self.loads = 0
        self._shards = collections.OrderedDict()  # key → {"lock", "shard"}
        self._lock = threading.Lock()

    def get(self, database, index, backend):
        key = (str(database.path), index, database.shards[index].sha256)
        with self._lock:
            entry = self._shards.setdefault(key, {"lock": threading.Lock(), "shard": None})
            self._shards.move_to_end(key)
        with entry["lock"]:
            loaded = entry["shard"] is None
            if loaded:
                entry["shard"] = _ResidentShard(database.load_shard(index), database.alphabet)
        if loaded:  # the held memory grows most with a new shard: only then is the budget checked
            with self._lock:
                self.loads += 1
            self._keep_within_budget(key, backend)
        return entry["shard"]

    def _keep_within_budget(self, newest, backend):
        budget = self.budget if self.budget is not None else _default_shard_budget(backend)
        with self._lock:
            footprints = {key: entry["shard"].footprint() for key, entry in self._shards.items() if entry["shard"]}
            total = sum(footprints.values())
            for key in [key for key in self._shards if key != newest]:
                if total <= budget:
                    break
                self._shards.pop(key)
                total -= footprints.get(key, 0)
                log.info("database shard %d of %s leaves this worker's memory (shards held: %.2f GB, budget %.2f GB)",
                         key[1], key[0], total / 1e9, budget / 1e9)

    def release(self, database):
        """Let every shard of `database` go."""
        with self._lock:
            for key in [key for key in self._shards if key[0] == str(database.path)]:
                self._shards.pop(key)


def _default_shard_budget(backend):
    if backend == "gpu":
        return _gpu_engine().memory_bytes // 2
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


#: This process's resident shards, shared by its worker threads.
resident_shards = ResidentShards()


#: At most this share of a worker's threads run SSV at once: the filters' one stage that fills
#: the GPU, and the one a task spends longest in. Tasks that start together otherwise leave the
#: GPU together and run their host steps, Viterbi and tails together while it idles. A cap of
#: 3/4 of the threads on the whole filter phase left those gaps in place (4 × H200: the GPUs
#: 24 to 33 % busy 9 to 12 s into a 37 s search, the other quarter of the threads waiting);
#: paced, each task leaves SSV as the next one enters, so one task's host work runs beside
#: another's SSV (`benchmarks/README.md`, the scaling section's session 24).
SIEVE_SHARE = 0.25
_sieve_slots = None  # a semaphore of the worker's share once `prepare_worker` knows its threads


def prepare_worker(lengths, backend, shard_memory, models=None, threads=None):
    """Runs on every worker as a search starts (`DaskExecutor.prepare_workers`): sets the memory
    its resident shards may take (bytes, or None for the default), how many of its `threads`
    may run SSV at once (`SIEVE_SHARE`) and, on the GPU backend, starts
    loading the kernels that models of these lengths need in a background thread, so that it
    overlaps reading the database. Given the search's `models` on disk, it also configures them
    all for the GPU filters in the background (a worker in another process reads the file
    first): every worker needs every model, and this is work that each worker otherwise did in
    its tasks, holding its GIL, whatever share of the database it has. A task waits only for
    its own models (`_filter_models`)."""
    global _sieve_slots
    resident_shards.budget = shard_memory
    if backend != "gpu":
        return
    if threads:
        _sieve_slots = threading.BoundedSemaphore(max(1, round(SIEVE_SHARE * threads)))

    def load_kernels():
        try:
            _gpu_engine().preload(lengths)
        except Exception as error:  # the task that needs the kernel raises it in full
            log.debug("loading kernels ahead failed: %s", error)

    threading.Thread(target=load_kernels, name="gpuhmm-kernel-load", daemon=True).start()
    if not isinstance(models, ModelsOnDisk):
        return
    with _configured_lock:
        if models.key in _configuring_ahead:
            return
        done = _configuring_ahead[models.key] = threading.Event()

    def configure_models():
        try:
            hmms = models.load()
            order = shortest_first(lengths)
            for start in range(0, len(order), _AHEAD_BATCH):
                batch = order[start:start + _AHEAD_BATCH]
                _configure(models.key, batch, [hmms[position] for position in batch])
        except Exception as error:  # tasks configure what is missing, and raise its error in full
            log.debug("configuring models ahead failed: %s", error)
        finally:
            with _configured_lock:
                done.set()
                _configured_lock.notify_all()

    threading.Thread(target=configure_models, name="gpuhmm-model-configure", daemon=True).start()
