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
"""

from __future__ import annotations

from pyhmmer.plan7 import TopHits

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
