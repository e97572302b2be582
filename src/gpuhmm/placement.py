"""Where a job runs: the backend, the executor and its threads and GPUs, from the settings and a
cell estimate made before the inputs are read.

`start_executor` picks what runs a search's tasks: a `cluster.DaskExecutor` for a running
scheduler or several local GPUs, else a `local.LocalExecutor` of threads in this process.
`--backend auto` takes the GPU for a job of at least `options.AUTO_GPU_MIN_CELLS_PER_THREAD`
cells (Σ M × residues) per thread (`may_use_gpu`), estimated from the files' sizes
(`expected_cells`); `resolve_backend` then checks that the GPU is usable, and `auto_choice`
says what was chosen.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from . import options
from ._host import available_cpus
from .cluster import DaskExecutor, local_gpus
from .engine import cupy_problem, gpu_problem
from .errors import GpuhmmError
from .local import LocalExecutor

#: Bytes per model node of HMMER's binary model files, uncompressed; its text files take more, so
#: that an estimate of a file's nodes from its size errs towards the GPU.
NODE_BYTES = 200


def start_executor(engine, expected_cells=None):
    """What runs the tasks of a search with `engine`'s settings (`options.EngineSettings`), started
    now: a `DaskExecutor` for a running scheduler or several local GPUs, else a `LocalExecutor`
    of `--cpu` threads in this process. Where the GPU backend may run (`may_use_gpu`:
    `--backend gpu`, or `auto` and a job of `expected_cells`, an estimate or None, large enough),
    the GPUs are counted and a `LocalExecutor` starts its GPU as it is made; a job too small for
    the GPU takes neither."""
    workers = engine.threads or available_cpus()
    if engine.scheduler:
        return DaskExecutor(engine.scheduler, workers)
    gpu = may_use_gpu(engine.backend, expected_cells, workers)
    gpus = local_gpus(engine.backend) if gpu else 0
    if gpus > 1:
        return DaskExecutor(None, workers, gpus)
    return LocalExecutor(workers, gpus, warm_gpu=gpu)


def input_bytes(path):
    """The bytes a search reads from `path`: a file's, gzip's uncompressed (its trailer's count),
    a directory's files' together; None for a stream or what is not a path."""
    if not isinstance(path, (str, os.PathLike)) or str(path) == "-":
        return None
    from .db.format import MANIFEST

    path = Path(path)
    if path.name == MANIFEST:  # a makedb database named by its manifest: the database's files
        path = path.parent
    try:
        if path.is_dir():
            return sum(entry.stat().st_size for entry in path.iterdir() if entry.is_file())
        if not path.is_file():
            return None
        size = path.stat().st_size
        with open(path, "rb") as handle:
            if handle.read(2) != b"\x1f\x8b" or size < 18:
                return size
            handle.seek(-4, os.SEEK_END)
            # The trailer counts modulo 2**32: a larger file is at least its compressed size.
            return max(size, struct.unpack("<I", handle.read(4))[0])
    except OSError:
        return None


def expected_cells(queries, sequences, queries_are_sequences=False, rounds=1):
    """Cells (Σ M × residues) a search may cover, from its files' sizes alone, before they are
    read: an estimate erring high (a FASTA file's bytes for its residues, `NODE_BYTES` per model
    node, a query's residues for its nodes), times the `rounds` the database is searched
    (jackhmmer's); None where a size is unknown."""
    nodes, residues = input_bytes(queries), input_bytes(sequences)
    if nodes is None or residues is None:
        return None
    return (nodes if queries_are_sequences else nodes / NODE_BYTES) * residues * rounds


def job_cells(hmms, sequences, rounds=1):
    """Cells (Σ M × residues) of the models `hmms` against the database `sequences` before it is
    read, times the `rounds` it is searched: a makedb database's own residue count, else the
    FASTA file's size (`input_bytes`), a little more; None where that is unknown."""
    from .db.database import SequenceDatabase  # here: the CLI starts its executor first
    from .db.format import MANIFEST

    path = Path(sequences)
    if path.is_dir() or path.name == MANIFEST:
        residues = SequenceDatabase.open(path).residues
    else:
        residues = input_bytes(path)
    return None if residues is None else sum(hmm.M for hmm in hmms) * residues * rounds


def may_use_gpu(backend, cells, threads):
    """Whether a search may run on the GPU backend: asked for, or `auto` with `cells` (None:
    unknown) at least `options.AUTO_GPU_MIN_CELLS_PER_THREAD` per thread."""
    if backend == "auto":
        return cells is None or cells >= options.AUTO_GPU_MIN_CELLS_PER_THREAD * threads
    return backend == "gpu"


def resolve_backend(requested, cluster_gpus=0, scheduler=None, cells=None, threads=1):
    """The backend a run uses: "gpu" where asked for, or, with "auto", where a GPU is usable and
    the job's `cells` (None: unknown) are enough for it over `threads` worker threads
    (`may_use_gpu`; `auto_choice` tells the choice).

    With a local cluster of several GPUs (`cluster_gpus`), or `--backend gpu` on a running
    `scheduler`'s workers, CUDA is the workers' alone: this process only checks that CuPy is
    installed (starting CUDA here would cost a second and a context on a GPU it does not use),
    and each worker finds its GPU."""
    if not may_use_gpu(requested, cells, threads):
        return "cpu"
    problem = cupy_problem() if cluster_gpus > 1 or (scheduler and requested == "gpu") else gpu_problem()
    if problem is None:
        return "gpu"
    if requested == "gpu":
        raise GpuhmmError("--backend gpu", problem)
    return "cpu"


def auto_choice(backend, cells, threads):
    """How `--backend auto` chose `backend` for a job of `cells` (None: unknown) on `threads`
    threads, as the log tells it."""
    if backend == "gpu":
        return f"backend auto: the GPU, for {'unknown' if cells is None else f'{cells:.3g}'} cells"
    if not may_use_gpu("auto", cells, threads):
        cutoff = options.AUTO_GPU_MIN_CELLS_PER_THREAD * threads
        return f"backend auto: the CPU, for {cells:.3g} cells (the GPU from {cutoff:.3g} on {threads} thread(s))"
    return "backend auto: the CPU, no GPU being usable here (--backend gpu says why)"
