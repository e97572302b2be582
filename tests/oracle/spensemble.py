"""HMMER 3.4's clustering of sampled domains into envelopes (`src/p7_spensemble.c`):
`p7_spensemble_Add`'s segment list, `link_spsamples`, `p7_spensemble_Cluster`, with Easel's
single-linkage clustering (`esl_cluster_SingleLinkage`, `esl_cluster.c`) replayed exactly, since
the cluster numbers decide the order of clusters that start at the same residue.

Float rules kept: overlap fractions are float32 divisions compared with float32 0.8; a cluster's
probability is ninc ⊘ nsamples in float32 against 0.25; the endpoint threshold is
`ceilf(ninc ⊗ 0.02f)`. The final order is by start residue, ties in cluster order (glibc's qsort
is a stable merge sort for these arrays).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gpuhmm.stages.tail.profile import F32

#: `p7_domaindef_Create`'s clustering parameters (hmmsearch never changes them).
MIN_OVERLAP = F32(0.8)  # of the smaller of two segments
MAX_DIAGONAL_DIFFERENCE = 4
MIN_POSTERIOR = F32(0.25)
MIN_ENDPOINT_FRACTION = F32(0.02)


@dataclasses.dataclass(frozen=True)
class Segments:
    """The sampled domains of one region (`sp->sp`): sample index, sequence start and end i..j,
    model start and end k..m, in the order they were added."""

    sample: np.ndarray  # int64 (n,)
    i: np.ndarray
    j: np.ndarray
    k: np.ndarray
    m: np.ndarray


@dataclasses.dataclass(frozen=True)
class Envelope:
    """A significant cluster (`sp->sigc`): its consensus coordinates and posterior probability."""

    i: int
    j: int
    k: int
    m: int
    cluster: int
    prob: np.float32


def _overlaps(start, end, plus_one):
    """`(float) nov / (float) n < min_overlap` negated, for every pair: overlap over the shorter."""
    overlap = np.minimum.outer(end, end) - np.maximum.outer(start, start) + (1 if plus_one else 0)
    length = end - start + 1
    shorter = np.minimum.outer(length, length)
    return ~(overlap.astype(F32) / shorter.astype(F32) < MIN_OVERLAP)


def links(segments):
    """`link_spsamples` for every pair: overlapping in sequence (by 80% of the shorter) and in the
    model (the same test but without its +1), and on nearby diagonals at either end."""
    s = segments
    start_diagonal, end_diagonal = s.i - s.k, s.j - s.m
    near = (np.abs(np.subtract.outer(start_diagonal, start_diagonal)) <= MAX_DIAGONAL_DIFFERENCE) | (
        np.abs(np.subtract.outer(end_diagonal, end_diagonal)) <= MAX_DIAGONAL_DIFFERENCE
    )
    return _overlaps(s.i, s.j, plus_one=True) & _overlaps(s.k, s.m, plus_one=False) & near


def single_linkage(linked):
    """`esl_cluster_SingleLinkage`: cluster numbers, in the order Easel's stack of unclustered
    vertices (deleted by swapping with its top) reaches them."""
    n = linked.shape[0]
    available = np.arange(n - 1, -1, -1)
    remaining = n
    assignment = np.empty(n, dtype=np.int64)
    clusters = 0
    while remaining > 0:
        remaining -= 1
        pending = [int(available[remaining])]
        while pending:
            v = pending.pop()
            assignment[v] = clusters
            # Easel tests positions remaining−1 down to 0 and swap-deletes each linked vertex; every
            # vertex it swaps down was already tested, so the linked set is fixed before deleting.
            for position in np.flatnonzero(linked[v, available[:remaining]])[::-1]:
                pending.append(int(available[position]))
                available[position] = available[remaining - 1]
                remaining -= 1
        clusters += 1
    return assignment, clusters


def _endpoint(values, threshold, leftmost):
    """The leftmost (or rightmost) coordinate reached by at least `threshold` members, else the
    first most frequent one (`esl_vec_IArgMax`)."""
    low = int(values.min())
    counts = np.bincount(values - low)
    enough = np.flatnonzero(counts >= threshold)
    if enough.size:
        return low + int(enough[0] if leftmost else enough[-1])
    return low + int(np.argmax(counts))


def cluster(segments, nsamples):
    """`p7_spensemble_Cluster`: the significant envelopes, by start residue."""
    assignment, clusters = single_linkage(links(segments))
    envelopes = []
    for c in range(clusters):
        members = np.flatnonzero(assignment == c)
        samples = segments.sample[members]
        ninc = 1 + int(np.count_nonzero(samples[1:] != samples[:-1]))  # distinct samples, in order
        prob = F32(ninc) / F32(nsamples)
        if prob < MIN_POSTERIOR:
            continue
        threshold = math.ceil(F32(ninc) * MIN_ENDPOINT_FRACTION)
        i = _endpoint(segments.i[members], threshold, leftmost=True)
        k = _endpoint(segments.k[members], threshold, leftmost=True)
        j = _endpoint(segments.j[members], threshold, leftmost=False)
        m = _endpoint(segments.m[members], threshold, leftmost=False)
        if i > j or k > m:
            continue
        envelopes.append(Envelope(i=i, j=j, k=k, m=m, cluster=c, prob=prob))
    return sorted(envelopes, key=lambda envelope: envelope.i)
