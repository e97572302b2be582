"""gpuhmm: hmmsearch-identical profile HMM searches, sharded over Dask workers and GPUs.

The public API speaks HMMER's vocabulary::

    import gpuhmm
    hits = gpuhmm.hmmsearch("Pfam-A.hmm", "proteins.faa", gpuhmm.SearchOptions(cut="ga"),
                            gpuhmm.OutputFiles(tblout="hits.tblout"))

`hits` is one pyhmmer `TopHits` per model, in file order, with E-values over the whole
database. The searches also take what `pyhmmer.hmmsearch` takes instead of files: HMMs or an
open `HMMFile`, and digital sequences (a `DigitalSequenceBlock`, a digital `SequenceFile`).
Importing gpuhmm needs neither CUDA nor Dask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._version import __version__
from .errors import GpuhmmError
from .options import (
    EngineSettings,
    JackhmmerOptions,
    OutputFiles,
    PhmmerOptions,
    ReportSettings,
    SearchOptions,
    SequenceFormats,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from os import PathLike

    from pyhmmer.easel import DigitalSequence, DigitalSequenceBlock, SequenceFile
    from pyhmmer.plan7 import HMM, HMMFile, IterationResult, TopHits

    Models = str | PathLike | HMM | HMMFile | Iterable[HMM]
    Sequences = str | PathLike | DigitalSequence | DigitalSequenceBlock | SequenceFile | Iterable[DigitalSequence]


def __getattr__(name: str) -> object:
    # The database API loads numpy and pyhmmer; importing it lazily lets the CLI start its
    # Dask cluster first, while those load.
    if name in ("SequenceDatabase", "makedb"):
        from .db import database

        return getattr(database, name)
    raise AttributeError(f"module 'gpuhmm' has no attribute {name!r}")


def hmmsearch(
    models_file: Models,
    sequences: Sequences,
    options: SearchOptions = SearchOptions(),
    outputs: OutputFiles = OutputFiles(),
    engine: EngineSettings = EngineSettings(),
    *,
    formats: SequenceFormats = SequenceFormats(),
) -> list[TopHits]:
    """Search every model of `models_file` against `sequences` (a sequence file in the format
    `formats.tformat` asserts or Easel detects, a makedb directory, or pyhmmer's objects), as
    hmmsearch does: one merged `TopHits` per model, in file order."""
    from .api import hmmsearch as run

    return run(models_file, sequences, options, outputs, engine, formats=formats)


def phmmer(
    queries_file: Sequences,
    sequences: Sequences,
    options: SearchOptions = SearchOptions(),
    outputs: OutputFiles = OutputFiles(),
    engine: EngineSettings = EngineSettings(),
    builder: PhmmerOptions = PhmmerOptions(),
    *,
    formats: SequenceFormats = SequenceFormats(),
) -> list[TopHits]:
    """Search each protein of `queries_file` against `sequences` as phmmer does: one `TopHits`
    per query, in file order. `builder` holds phmmer's own options (score system, calibration),
    `formats` the files' formats (`--qformat`, `--tformat`; by default Easel detects them)."""
    from .api import phmmer as run

    return run(queries_file, sequences, options, outputs, engine, builder=builder, formats=formats)


def hmmscan(
    models_file: Models,
    sequences: Sequences,
    options: SearchOptions = SearchOptions(),
    outputs: OutputFiles = OutputFiles(),
    engine: EngineSettings = EngineSettings(),
    *,
    formats: SequenceFormats = SequenceFormats(),
) -> list[TopHits]:
    """Annotate each sequence of `sequences` (in the format `formats.qformat` asserts, or Easel
    detects) with the models of `models_file` as hmmscan does: one `TopHits` per sequence, in
    file order."""
    from .api import hmmscan as run

    return run(models_file, sequences, options, outputs, engine, formats=formats)


def jackhmmer(
    queries_file: Sequences,
    sequences: Sequences,
    options: SearchOptions | None = None,
    outputs: OutputFiles = OutputFiles(),
    engine: EngineSettings = EngineSettings(),
    settings: JackhmmerOptions = JackhmmerOptions(),
    builder: PhmmerOptions = PhmmerOptions(),
    *,
    formats: SequenceFormats = SequenceFormats(),
    checkpoints: bool = False,
) -> Iterator[IterationResult] | Iterator[list[IterationResult]]:
    """Search each protein of `queries_file` iteratively against `sequences` as jackhmmer
    does, and give what `pyhmmer.hmmer.jackhmmer` gives: per query with residues, in file
    order, its last round as a pyhmmer `IterationResult` (model, hits, alignment, converged,
    round number), or with `checkpoints` the list of every round's. `options` default to
    jackhmmer's (inclusion E-values 1e-3, not hmmsearch's 1e-2); `settings` holds the rounds
    (`max_iterations`, pyhmmer's name for -N), model construction, `--seq_limit` and the
    checkpoint files, `builder` the first round's score system, `formats` the files' formats
    (by default Easel detects them). The results' hits keep their round's model as query, as
    pyhmmer's do; the alignments are named as jackhmmer's `-A`."""
    from .api import jackhmmer as run
    from .iterative import iteration_results
    from .options import DEFAULT_SEARCH

    options = DEFAULT_SEARCH if options is None else options
    queries = run(
        queries_file, sequences, options, outputs, engine, settings=settings, builder=builder, formats=formats
    )
    return iteration_results(queries, checkpoints)


__all__ = [
    "EngineSettings",
    "GpuhmmError",
    "JackhmmerOptions",
    "OutputFiles",
    "PhmmerOptions",
    "ReportSettings",
    "SearchOptions",
    "SequenceDatabase",
    "SequenceFormats",
    "__version__",
    "hmmscan",
    "hmmsearch",
    "jackhmmer",
    "makedb",
    "phmmer",
]
