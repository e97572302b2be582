"""What exactness needs from inside pyhmmer's `TopHits` (its pickle state, pyhmmer 0.12.3).

Why: hmmsearch keeps a hit in its list when it is reportable under the Z *counted so far*
(p7_pli_NewSeq sets Z = sequences read, before p7_Pipeline thresholds each target). So with
an automatic Z, a sequence at file position i is kept iff P·i ≤ E, though only P·Z ≤ E ones
are reported at the end. The kept-but-unreported hits are invisible except in one place: the
tables' name and accession columns are as wide as the longest name in the *whole* list. To
write hmmsearch's bytes, each shard's list must hold exactly the hits hmmsearch would keep.

A shard searched in file order with an automatic Z keeps P·j ≤ E, with j its rank inside the
shard (j ≤ i): a superset. `as_hmmsearch_keeps` drops the hits whose P·i > E. Merging the
shards then sums their Z to the database size and re-thresholds, as hmmsearch's end does.

`as_data` and `from_data` carry a TopHits through a file as data alone (no pickle), checked
on the way back in.
"""

from __future__ import annotations

import io
import struct

from pyhmmer.easel import Alphabet, VectorU8
from pyhmmer.plan7 import HMMFile, TopHits

from .records import check_hit
from .text import label

#: P7_PIPELINE.Z_setby when Z counts the targets (p7_ZSETBY_NTARGETS).
_Z_SET_BY_TARGETS = 0

#: hmmsearch's "Passed ... filter" statistics, in pipeline order.
FILTER_COUNTS = ("n_past_msv", "n_past_bias", "n_past_vit", "n_past_fwd")


def filter_counts(hits):
    """The pipeline statistics of `hits`: targets searched and passed each filter."""
    return _counts(hits.__getstate__()["pipeline"])


def _counts(pipeline):
    return {"nseqs": pipeline["nseqs"], **{name: pipeline[name] for name in FILTER_COUNTS}}


def as_hmmsearch_keeps(hits, file_position):
    """One shard's `hits` as hmmsearch (reading the file in order) would have kept them, as a
    worker sends them back: without their query (`attached` puts it back). pyhmmer pickles a
    TopHits with its query, and a Pfam model pickles to tens of KB, so the results of 2766
    models × 16 shards would carry 1.6 GB of models for the client to unpickle, holding its
    GIL; the client has the models.

    Returns that state of the hits, less those hmmsearch would never have kept, and the
    pipeline's statistics (targets searched, passed each filter). `file_position(hit)` is the
    1-based position of the hit's sequence in the database file. Only an automatic Z with
    E-value reporting thresholds makes the kept list depend on that position.
    """
    state = hits.__getstate__()
    pipeline = state["pipeline"]
    counts = _counts(pipeline)
    if not pipeline["by_E"] or pipeline["Z_setby"] != _Z_SET_BY_TARGETS:
        return state, counts
    ranked = list(hits)  # iteration follows state["hit"], the sorted order
    keep = [True] * state["N"]
    for rank, index in enumerate(state["hit"]):
        hit = ranked[rank]
        # The same double arithmetic as p7_pli_TargetReportable: exp(lnP) * Z <= E.
        keep[index] = hit.pvalue * file_position(hit) <= pipeline["E"]
    if not all(keep):
        kept = [index for index in range(state["N"]) if keep[index]]
        renumber = {old: new for new, old in enumerate(kept)}
        state["unsrt"] = [state["unsrt"][index] for index in kept]
        state["hit"] = [renumber[index] for index in state["hit"] if index in renumber]
        state["N"] = len(kept)
    return state, counts


def counting_whole_shard(hits, sequences, residues, known, uncounted):
    """Hits of a search over a shard's filter survivors, restated as a search of the whole shard.

    pyhmmer counted only the survivors; hmmsearch's statistics (and an automatic Z, here
    re-thresholded) count every target of the shard. `known` gives the counts the GPU stages
    know for the whole shard (past MSV and bias); `uncounted` what they passed at a later stage
    but stopped before pyhmmer (past Viterbi, stopped by the Forward filter), added to
    pyhmmer's count. The rest are pyhmmer's own, exactly hmmsearch's since the survivors include
    every sequence HMMER passes that far.
    """

    def restate(pipeline):
        pipeline.update(known, nseqs=sequences, nres=residues)
        for name, count in uncounted.items():
            pipeline[name] += count
        if pipeline["Z_setby"] == _Z_SET_BY_TARGETS:
            pipeline["Z"] = float(sequences)

    return _restated(hits, restate).merge()


def counting_every_model(hits, models, nodes, counts, model_position):
    """A scan's hits of one sequence over its filters' candidate models, restated as over all
    `models` (of `nodes` nodes in all): `counts` gives the models past MSV and bias, and those
    past Viterbi that the Forward filter stopped (added to pyhmmer's count).

    With an automatic Z, hmmscan keeps a hit when it is reportable under the number of models
    read so far (p7_pli_NewModel sets Z = models read), and its report's name column is as wide
    as the longest name kept. pyhmmer counted the candidates only, so it kept a superset: the
    hits hmmscan drops go, by `model_position(hit)` (1-based, in the model file), as
    `as_hmmsearch_keeps` drops a shard's, and the rest are thresholded again under Z = `models`.
    """
    state, _ = as_hmmsearch_keeps(hits, model_position)
    pipeline = state["pipeline"]
    pipeline.update(nmodels=models, nnodes=nodes, n_past_msv=counts["n_past_msv"], n_past_bias=counts["n_past_bias"])
    pipeline["n_past_vit"] += counts["n_past_vit"]
    if pipeline["Z_setby"] != _Z_SET_BY_TARGETS:
        return attached(state, hits.query)
    pipeline["Z"] = float(models)
    return attached(state, hits.query).merge()


def _restated(hits, restate):
    """A copy of `hits` whose pipeline statistics `restate(pipeline dict)` changed."""
    state = hits.__getstate__()
    restate(state["pipeline"])
    restated = TopHits(hits.query)
    restated.__setstate__(state)
    return restated


def attached(state, query):
    """The TopHits that `as_hmmsearch_keeps` gave `state` of, with `query` (the client's own
    model)."""
    hits = TopHits(query)
    hits.__setstate__(state)
    return hits


#: The fields of a TopHits state besides its hits, order and pipeline, and their types.
#: Pipeline fields that choose what the writers print, and their values in a protein search or
#: scan: no nhmmer columns; Z and domZ counted or set (`p7_zsetby_e`).
_SEARCH_VALUES = {"long_targets": (False,), "mode": (0, 1), "Z_setby": (0, 1, 2), "domZ_setby": (0, 1, 2)}
_STATE_FIELDS = {
    "_empty": bool,
    "N": int,
    "nreported": int,
    "nincluded": int,
    "is_sorted_by_sortkey": bool,
    "is_sorted_by_seqidx": bool,
}


def as_data(hits):
    """`hits` as data alone, for a file that may come back from anyone: (its state without the
    hits, as JSON-ready values; its query as HMMER's binary model; each hit's P7_HIT record,
    `p7_hit_Serialize`'s bytes). `from_data` reads them back."""
    state = hits.__getstate__()
    records = [bytes(hit) for hit in state.pop("unsrt")]
    del state["Nalloc"]  # pyhmmer's __setstate__ allocates exactly N
    model = io.BytesIO()
    hits.query.write(model, binary=True)
    return state, model.getvalue(), records


def from_data(state, model, records):
    """The TopHits that `as_data` gave; ValueError for data that is not one. pyhmmer's reader
    trusts the state it is given (the sorted order indexes memory, the records' sizes are read
    as they say), so all of it is checked first."""
    hits = TopHits(_query(model))
    pipeline = _checked_state(state, len(records), hits.__getstate__()["pipeline"])
    for index, record in enumerate(records):
        try:
            check_hit(record)
        except ValueError as error:
            raise ValueError(f"hit {index} of {label(hits.query)}: {error}") from None
    try:
        hits.__setstate__(
            dict(state, pipeline=pipeline, Nalloc=len(records), unsrt=[VectorU8(bytearray(r)) for r in records])
        )
    except (OverflowError, TypeError) as error:  # a number out of its C field's range
        raise ValueError(f"hits state of {label(hits.query)}: {error}") from None
    return hits


#: The start of an HMMER 3/f binary model (`read_bin30hmm`, native byte order): its magic
#: number, flags, M and alphabet type; and the alphabets, by type, with their sizes K.
_BINARY_MODEL = struct.Struct("=Iiii")
_V3F_MAGIC = 0xE8EDEDBA
_ALPHABETS = {1: (Alphabet.dna, 4), 2: (Alphabet.rna, 4), 3: (Alphabet.amino, 20)}


def _query(model):
    """The one HMM of the binary model `model`. HMMER's reader stops the process on an unknown
    alphabet and allocates M nodes before it reads them, so both are checked first: M must fit
    the bytes (each node holds 2K + 7 floats at least)."""
    if len(model) < _BINARY_MODEL.size:
        raise ValueError("query is not an HMMER binary model (cut short)")
    magic, _, M, alphabet = _BINARY_MODEL.unpack_from(model)
    if magic != _V3F_MAGIC or alphabet not in _ALPHABETS:
        raise ValueError("query is not an HMMER 3/f binary model")
    create, K = _ALPHABETS[alphabet]
    if not 0 < M * (2 * K + 7) * 4 <= len(model):
        raise ValueError(f"query model of {M} nodes in {len(model)} bytes")
    try:
        with HMMFile(io.BytesIO(model), alphabet=create()) as reader:
            queries = list(reader)
    except (EOFError, ValueError, OSError) as error:
        raise ValueError(f"query is not an HMMER binary model ({error})") from None
    if len(queries) != 1:
        raise ValueError(f"{len(queries)} query models where one belongs")
    return queries[0]


def _checked_state(state, count, fresh):
    """`state`'s pipeline, once `state` is shown to be a TopHits state of `count` hits whose
    pipeline has the fields and types of `fresh` (an empty TopHits's)."""
    if not isinstance(state, dict) or set(state) != {*_STATE_FIELDS, "hit", "pipeline"}:
        raise ValueError("hits state without the fields of a pyhmmer TopHits")
    for name, kind in _STATE_FIELDS.items():
        if type(state[name]) is not kind:
            raise ValueError(f"hits state field {name!r} is not {kind.__name__}")
    if state["N"] != count or not 0 <= state["nreported"] <= count or not 0 <= state["nincluded"] <= count:
        raise ValueError(f"hits state counts {state['N']}, {state['nreported']}, {state['nincluded']} of {count} hits")
    order = state["hit"]
    if not isinstance(order, list) or any(type(i) is not int for i in order) or sorted(order) != list(range(count)):
        raise ValueError(f"hits state's order is not an order of {count} hits")
    pipeline = state["pipeline"]
    if not isinstance(pipeline, dict) or set(pipeline) != set(fresh):
        raise ValueError("pipeline state without the fields of pyhmmer's")
    for name, value in pipeline.items():
        if type(value) is not type(fresh[name]):
            raise ValueError(f"pipeline field {name!r} is not {type(fresh[name]).__name__}")
        if isinstance(value, float) and value != value:
            raise ValueError(f"pipeline field {name!r} is not a number")
    # What an hmmsearch, phmmer or hmmscan pipeline holds, so that no other table format is forged.
    for name, allowed in _SEARCH_VALUES.items():
        if pipeline[name] not in allowed:
            raise ValueError(f"pipeline field {name!r} is {pipeline[name]!r}, not a protein search's")
    return pipeline
