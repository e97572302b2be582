"""The reduce step: one model's per-shard hits merged, and the hits files of model shards.

`TopHits.merge` sums the shards' automatic Z into the database size (or checks that a `-Z`
agrees), re-thresholds, and recomputes domZ: the result is hmmsearch's own hit list.
"""

from __future__ import annotations

import copyreg
import io
import pickle

from pyhmmer.plan7 import HMM, HMMFile

from ..errors import GpuhmmError
from .files import written_together

HITS_FORMAT = "gpuhmm-hits/1"


def reduce_shards(shard_hits):
    """One model's hits over the whole database, from its per-shard TopHits."""
    first, *rest = shard_hits
    return first.merge(*rest) if rest else first


def save_hits(path, hits, metadata):
    """The intermediate of one model shard: its models' merged TopHits, for `gpuhmm merge`."""
    with written_together([path]) as (handle,):
        pickler = pickle.Pickler(handle, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = {**copyreg.dispatch_table, HMM: _reduce_model}
        pickler.dump({"format": HITS_FORMAT, "hits": list(hits), **metadata})


def _reduce_model(hmm):
    """An HMM pickled as pyhmmer pickles it, or, where its name is not UTF-8 text (phmmer's
    model of a query with a Latin-1 name), which pyhmmer cannot pickle, in HMMER's binary form."""
    try:
        return hmm.__reduce__()
    except UnicodeDecodeError:
        data = io.BytesIO()
        hmm.write(data, binary=True)
        return _read_model, (data.getvalue(),)


def _read_model(data):
    with HMMFile(io.BytesIO(data)) as models:
        return models.read()


def load_hits(path):
    """Read a hits file written by `save_hits` (a trusted, locally produced intermediate)."""
    try:
        with open(path, "rb") as handle:
            content = pickle.load(handle)
    except FileNotFoundError:
        raise GpuhmmError(path, "hits file not found") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ValueError) as error:
        raise GpuhmmError(path, f"damaged or truncated hits file ({error})") from None
    if not isinstance(content, dict) or content.get("format") != HITS_FORMAT:
        raise GpuhmmError(path, f"not a {HITS_FORMAT} file")
    return content
