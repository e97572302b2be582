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
from .seqdb import SequenceDatabase, makedb


def hmmsearch(models_file, sequences, options=SearchOptions(), **keywords):
    """Search every model of `models_file` against `sequences`; see `gpuhmm.runner.hmmsearch`."""
    from .runner import hmmsearch as run

    return run(models_file, sequences, options, **keywords)


__all__ = ["GpuhmmError", "SearchOptions", "SequenceDatabase", "__version__", "hmmsearch", "makedb"]
