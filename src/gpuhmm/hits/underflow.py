"""E-values as HMMER 3.4's binaries print them, where they fall below the smallest normal double.

`hmmsearch`, `phmmer` and `hmmscan` start with `impl_Init()`, which turns on the SSE
flush-to-zero mode: a subnormal result becomes 0. So `exp(lnP)` of a P-value under DBL_MIN
is 0, and so is its product with Z (or domZ) where that falls under DBL_MIN; the binaries
print 0 where pyhmmer, which runs without that mode, gives 4.9e-324 or 5.2e-314.
"""

from __future__ import annotations

import dataclasses
import math
import sys

from pyhmmer.easel import VectorU8
from pyhmmer.plan7 import TopHits

from .records import decode_hit, encode_hit

SMALLEST_NORMAL = sys.float_info.min


def flushed(value):
    """`value` as a flush-to-zero step leaves it: 0 where it is subnormal."""
    return 0.0 if abs(value) < SMALLEST_NORMAL else value


def evalue(pvalue, searched):
    """`exp(lnP) * Z` (or domZ) as the binaries compute it, from `pvalue` = exp(lnP)."""
    return flushed(flushed(pvalue) * searched)


def as_printed(hits):
    """`hits` (a pyhmmer TopHits), or a copy whose E-values that the binaries print as 0 are 0
    for pyhmmer's writers and the report too: their lnP is −inf. A hit's E-value is over Z; a
    domain's over Z (i-Evalue) and domZ (c-Evalue), which underflow together unless -Z or
    --domZ is below 1: there a domain whose two differ keeps its P-value."""
    z, domz = hits.Z, hits.domZ
    # p7_Pipeline's sort key is -lnP, or the score that lnP decreases with: in a search (one
    # model's P-values) ranked hits have ever larger P-values, so none past a hit well clear of
    # underflow (twice the bound the loop tests) flushes.
    ranked = hits.mode == "search" and hits.is_sorted(by="key")
    state = None
    for rank, hit in enumerate(hits):
        hit_flushes = _flushes(hit.pvalue, z)
        # A hit scores at least the sum of the domains its score counts (p7_Pipeline), and a
        # domain it leaves out scores a few bits: with Z >= 1, only a hit near underflow has
        # domains that may flush.
        if not hit_flushes and z >= 1 and hit.pvalue >= 2 * SMALLEST_NORMAL:
            if ranked and hit.pvalue >= 4 * SMALLEST_NORMAL:
                break
            continue
        domains = [_flushes(domain.pvalue, z) and evalue(domain.pvalue, domz) == 0.0 for domain in hit.domains]
        if not (hit_flushes or any(domains)):
            continue
        state = state or hits.__getstate__()
        slot = state["hit"][rank]
        record = decode_hit(state["unsrt"][slot])
        replaced = [
            dataclasses.replace(domain, lnP=-math.inf) if flushes else domain
            for domain, flushes in zip(record.domains, domains)
        ]
        record = dataclasses.replace(record, lnP=-math.inf if hit_flushes else record.lnP, domains=tuple(replaced))
        state["unsrt"][slot] = VectorU8(bytearray(encode_hit(record)))
    if state is None:
        return hits
    printed = TopHits(hits.query)
    printed.__setstate__(state)
    return printed


def _flushes(pvalue, searched):
    """Whether the binaries print 0 for an E-value that pyhmmer gives as more than 0."""
    return pvalue * searched != 0.0 and evalue(pvalue, searched) == 0.0
