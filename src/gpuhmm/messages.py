"""What the client and the workers exchange: tasks, their shared context, and their results.

Task arguments are serialized even for workers in the client's process, so they stay small: a
database travels as a reference to its files or to shards held in memory, and the models and
options every task needs travel once per worker (`SharedContext`).
"""

from __future__ import annotations

import dataclasses
import pickle
import uuid

from .db.models import ModelsOnDisk
from .options import SearchOptions, filter_threshold


@dataclasses.dataclass(frozen=True)
class PipelineSettings:
    """What each worker thread's pyhmmer Pipeline is made from (p7_pipeline_Create's settings),
    typed: `of` a search's options, `arguments()` the Pipeline's keywords. Without -Z, Z stays
    automatic: each shard counts its targets, as hmmsearch does while it reads, and
    TopHits.merge sums the shards' counts into the database size."""

    Z: float | None
    domZ: float | None
    E: float
    T: float | None
    domE: float
    domT: float | None
    incE: float
    incT: float | None
    incdomE: float
    incdomT: float | None
    bit_cutoffs: str | None
    F1: float
    F2: float
    F3: float
    bias_filter: bool
    null2: bool
    seed: int

    @classmethod
    def of(cls, options: SearchOptions) -> PipelineSettings:
        # HMMER's --max: every filter passes everything, and the bias filter is off.
        given = (options.F1, options.F2, options.F3)
        F1, F2, F3 = (1.0, 1.0, 1.0) if options.max else (filter_threshold(value) for value in given)
        return cls(
            Z=options.Z,
            domZ=options.domZ,
            E=options.E,
            T=options.T,
            domE=options.domE,
            domT=options.domT,
            incE=options.incE,
            incT=options.incT,
            incdomE=options.incdomE,
            incdomT=options.incdomT,
            bit_cutoffs=options.bit_cutoffs,
            F1=F1,
            F2=F2,
            F3=F3,
            bias_filter=not (options.nobias or options.max),
            null2=not options.nonull2,
            seed=options.seed,
        )

    def arguments(self) -> dict:
        """Keyword arguments for `pyhmmer.plan7.Pipeline`."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class SearchTask:
    """One unit of work: some models (by position) against one database shard, or against its
    `piece`-th of `pieces` runs of consecutive sequences (CPU backend)."""

    positions: tuple
    shard: int
    cells: int  # Σ M × residues searched: the dynamic-programming cells the filters cover
    piece: int = 0
    pieces: int = 1


@dataclasses.dataclass(frozen=True)
class TaskResult:
    task: SearchTask
    hits: tuple  # per position in task.positions: its kept hits' state (`hits.tophits.as_hmmsearch_keeps`)
    seconds: float
    cpu_seconds: float  # the task's thread on a CPU: beside `seconds`, how long it waited (GPU, GIL, cores)
    filter_counts: dict  # hmmsearch's pipeline statistics, summed over the task's models
    stage_seconds: dict  # GPU filter stages and the CPU tail (GPU backend), plus Viterbi cells
    worker: str  # host:process id
    span: tuple  # (start, end), Unix seconds
    tail_span: tuple | None = None  # (queued, finished) of its pairs past the filters in the tail queue


@dataclasses.dataclass(frozen=True)
class ScanPiece:
    """Every `pieces`-th sequence of a shard from `piece` on, and the models (by position) each
    sequence's filters passed, or None for all of them; with them, per sequence of the shard
    (block position), how many models passed each GPU stage (`n_past_msv`, `n_past_bias`, and
    `n_past_vit` for those past Viterbi that the Forward filter stopped)."""

    shard: int
    piece: int
    pieces: int
    candidates: list | None
    filter_counts: dict | None = None


@dataclasses.dataclass(frozen=True)
class SharedContext:
    """What every task of a search needs, sent to each worker once."""

    search_key: str  # tells one search's configured models from another's on a long-lived worker
    models: tuple | ModelsOnDisk
    database: object
    pipeline: PipelineSettings
    backend: str
    domaindef: str = "gpu"  # where the GPU backend runs the stages after the Forward filter

    def __reduce__(self):
        # Pickled by pickle whichever pickler asks: Dask hands bytes that hold "__main__" (a
        # model's command line, run as `python -m`) to cloudpickle, which fails on pyhmmer's alphabets.
        fields = tuple(getattr(self, field.name) for field in dataclasses.fields(self))
        return _unpickled_context, (pickle.dumps(fields),)

    @classmethod
    def of(cls, models, database, pipeline, backend, domaindef="gpu"):
        if isinstance(models, ModelsOnDisk):
            return cls(models.key, models, database, pipeline, backend, domaindef)
        return cls(uuid.uuid4().hex, tuple(models), database, pipeline, backend, domaindef)


def _unpickled_context(fields):
    return SharedContext(*pickle.loads(fields))
