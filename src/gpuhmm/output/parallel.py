"""The per-query outputs (`-o` and the three tables) formatted by threads and written in query order.

Each output is a `PerQuery` writer: what comes before the first query, each query's part, and
what follows the last. Threads format one output of a run of consecutive queries each, into a
memory stream (`native.stream`), and the parts are written in order as they are done. HMMER's
writers release the GIL (`native`), so the threads format side by side; the Python writers,
where those are unavailable, give the same bytes one thread at a time.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, Protocol

from pyhmmer.plan7 import TopHits

from .._host import available_cpus
from ..hits.underflow import as_printed
from . import native

#: Runs per thread: enough that one query with many hits does not leave the others idle.
RUNS_PER_THREAD = 8
#: Hits a run holds at most, unless one query has more: what a run's parts keep in memory.
RUN_HITS = 2048
#: Runs per thread formatted ahead of those being written, and written ahead of those done, up to
#: AHEAD_MAX runs: on a host of many cores the formatted text held stays bounded.
AHEAD_PER_THREAD = 2
AHEAD_MAX = 32


class PerQuery(Protocol):
    def prologue(self) -> bytes: ...

    def write_query(self, out, index: int, hits: TopHits, place) -> None:
        """Write query `index`'s part to `out`, a `native.stream`; `place` is `native.located(hits)`
        where `out` is a C stream, else None."""

    def epilogue(self) -> bytes: ...


def runs(hits: Sequence[TopHits], count: int) -> list[range]:
    """At most `count` runs of consecutive queries, each with about as many hits as the others
    (a query counts one more than its hits: an empty one still has its part to write)."""
    weights = list(itertools.accumulate(len(found) + 1 for found in hits))
    total, bounds = (weights[-1] if weights else 0), [0]
    for index, weight in enumerate(weights[:-1], 1):
        if weight * count >= total * len(bounds):
            bounds.append(index)
    return [range(start, end) for start, end in itertools.pairwise([*bounds, len(hits)]) if end > start]


def write_per_query(outputs: Sequence[tuple[BinaryIO, PerQuery]], hits: Sequence[TopHits]) -> list[TopHits]:
    """Write each (handle, writer) of `outputs` for `hits`, one TopHits per query in order;
    returns the hits as printed (`hits.underflow.as_printed`), which the writers are given."""
    threads = available_cpus()
    printed = [as_printed(found) for found in hits]
    places = [native.located(found) for found in printed]
    weight = sum(len(found) + 1 for found in printed)
    pieces = runs(printed, max(threads * RUNS_PER_THREAD, weight // RUN_HITS))

    def part(queries: range, writer: PerQuery):
        with native.stream() as out:
            for index in queries:
                writer.write_query(out, index, printed[index], places[index])
        return out.value

    for handle, writer in outputs:
        handle.write(writer.prologue())
    ahead = min(AHEAD_PER_THREAD * threads, AHEAD_MAX)
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(ThreadPoolExecutor(threads))
        # a thread per output writes its parts in order, the outputs side by side
        writing = [stack.enter_context(ThreadPoolExecutor(1)) for _ in outputs]
        formatting, written = collections.deque(), collections.deque()  # per run, its parts' futures

        def hand_over():
            """The oldest run's parts to the writers, once formatted; at most `ahead` runs wait
            to be written, so that memory holds only so many."""
            parts = [future.result() for future in formatting.popleft()]
            handles = [handle for handle, _ in outputs]
            written.append([thread.submit(handle.write, part) for thread, handle, part in zip(writing, handles, parts)])
            while len(written) > ahead:
                for future in written.popleft():
                    future.result()

        for queries in pieces:
            # each output of a run apart, so that a long run's are formatted side by side
            formatting.append([pool.submit(part, queries, writer) for _, writer in outputs])
            if len(formatting) > ahead:
                hand_over()
        while formatting:
            hand_over()
        for futures in written:
            for future in futures:
                future.result()
    for handle, writer in outputs:
        handle.write(writer.epilogue())
    return printed
