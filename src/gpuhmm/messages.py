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
    arguments: dict
    backend: str
    domaindef: str = "gpu"  # where the GPU backend runs the stages after the Forward filter

    def __reduce__(self):
        # Pickled by pickle whichever pickler asks: Dask hands bytes that hold "__main__" (a
        # model's command line, run as `python -m`) to cloudpickle, which fails on pyhmmer's alphabets.
        fields = tuple(getattr(self, field.name) for field in dataclasses.fields(self))
        return _unpickled_context, (pickle.dumps(fields),)

    @classmethod
    def of(cls, models, database, arguments, backend, domaindef="gpu"):
        if isinstance(models, ModelsOnDisk):
            return cls(models.key, models, database, arguments, backend, domaindef)
        return cls(uuid.uuid4().hex, tuple(models), database, arguments, backend, domaindef)


def _unpickled_context(fields):
    return SharedContext(*pickle.loads(fields))
