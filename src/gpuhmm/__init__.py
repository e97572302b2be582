"""gpuhmm: hmmsearch-identical profile HMM searches, sharded over Dask workers and GPUs.

The public API speaks HMMER's vocabulary::

    import gpuhmm
    hits = gpuhmm.hmmsearch("Pfam-A.hmm", "proteins.faa", gpuhmm.SearchOptions(cut="ga"),
                            tblout="hits.tblout")

`hits` is one pyhmmer `TopHits` per model, in file order, with E-values over the whole
database. Importing gpuhmm needs neither CUDA nor Dask.
"""

from ._version import __version__
from .errors import GpuhmmError
from .options import SearchOptions


def __getattr__(name):
    # The database API loads numpy and pyhmmer; importing it lazily lets the CLI start its
    # Dask cluster first, while those load.
    if name in ("SequenceDatabase", "makedb"):
        from . import seqdb

        return getattr(seqdb, name)
    raise AttributeError(f"module 'gpuhmm' has no attribute {name!r}")


def hmmsearch(models_file, sequences, options=SearchOptions(), **keywords):
    """Search every model of `models_file` against `sequences`; see `gpuhmm.runner.hmmsearch`."""
    from .runner import hmmsearch as run

    return run(models_file, sequences, options, **keywords)


def phmmer(queries_file, sequences, options=SearchOptions(), **keywords):
    """Search each protein of `queries_file` against `sequences` as phmmer does; see
    `gpuhmm.runner.phmmer`."""
    from .runner import phmmer as run

    return run(queries_file, sequences, options, **keywords)


def hmmscan(models_file, sequences, options=SearchOptions(), **keywords):
    """Annotate each sequence of `sequences` with the models of `models_file` as hmmscan does;
    one TopHits per sequence. See `gpuhmm.runner.hmmscan`."""
    from .runner import hmmscan as run

    return run(models_file, sequences, options, **keywords)


__all__ = ["GpuhmmError", "SearchOptions", "SequenceDatabase", "__version__", "hmmscan", "hmmsearch", "makedb",
           "phmmer"]
