"""hmmsearch's way with a large sequence file: the targets read a part at a time (`db.stream`)
while the parts already read are searched, so that the host holds a few parts, never the
database.

On the CPU threads (`search`) the parts are Easel's blocks, each searched through pyhmmer's
whole pipeline (`p7_Pipeline`, as hmmsearch's worker threads run it) by every thread whatever
the number of models. On the GPU (`search_pieces`) they are pieces of plain FASTA, each held as
a database and searched as one (`search.run_search`), the next read meanwhile.

Each part's hits keep what hmmsearch keeps, by their file positions (`tophits.as_hmmsearch_keeps`),
and a model's parts merge as a database's shards do: their automatic Z sums to the file's.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time

from .db import database, stream
from .db.fasta import NotPlain, alphabet_name
from .db.models import balance_by_length
from .hits import tophits
from .hits.text import hit_text, sequence_text
from .messages import PipelineSettings
from .search import SearchResult
from .worker.state import STATE, worker_name

#: Block searches queued ahead of the searching threads, per thread.
AHEAD_PER_THREAD = 2


def search(models, path, alphabet, format, options, threads):
    """`models` (pyhmmer HMMs) against the sequence file `path` (in `format`, None: detected),
    digitized in `alphabet`, with the search's `options`, on `threads` threads: the
    `search.SearchResult` (per model, the kept hits of each block, in file order) and the
    `db.stream.StreamedFile` read."""
    started, started_at = time.perf_counter(), time.time()
    read, pipeline = stream.StreamedFile(), PipelineSettings.of(options)
    result = SearchResult(hits_by_model=[[] for _ in models])
    # Each block is searched by model groups, a thread's each: few blocks keep every thread busy.
    groups = [group for group in balance_by_length([model.M for model in models], min(threads, len(models))) if group]

    def gather(group, outcome):
        kept, seconds, cpu_seconds, residues = outcome
        for position, (state, counts) in zip(group, kept):
            result.hits_by_model[position].append(tophits.attached(state, models[position]))
            for name, count in counts.items():
                result.filter_counts[name] = result.filter_counts.get(name, 0) + count
        result.tasks += 1
        result.task_seconds += seconds
        result.cells += sum(models[position].M for position in group) * residues
        worker = result.workers.setdefault(worker_name(), {"tasks": 0, "busy_s": 0.0, "busy_cpu_s": 0.0})
        worker["tasks"] += 1
        worker["busy_s"] = round(worker["busy_s"] + seconds, 3)
        worker["busy_cpu_s"] = round(worker["busy_cpu_s"] + cpu_seconds, 3)

    with concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="gpuhmm-stream") as pool:
        pending = collections.deque()
        for first, block, residues in stream.blocks(path, alphabet, format, read):
            positions = _Positions(block, first)
            for group in groups:
                searched = [models[position] for position in group]
                task = pool.submit(_search_block, searched, block, positions, residues, alphabet, pipeline)
                pending.append((group, task))
            while len(pending) > AHEAD_PER_THREAD * threads:
                group, task = pending.popleft()
                gather(group, task.result())
        while pending:
            group, task = pending.popleft()
            gather(group, task.result())
    for worker in result.workers.values():
        worker.update(first_start_s=0.0, last_end_s=round(time.time() - started_at, 3))
    result.wall_seconds = time.perf_counter() - started
    return result, read


def search_pieces(path, alphabet, format, shards, shard_memory, search):
    """`search(database)` (a `search.SearchResult`) of each piece of `path` that holds sequences,
    digitized in `alphabet`, as a database of `shards` shards held in memory
    (`db.database.held_pieces`, pieces of `stream.piece_bytes(shard_memory)` of text), the next
    piece read while one is searched, and the `SearchResult` of them all with the
    `db.stream.StreamedFile` read. Where a piece is not plain FASTA the file is read whole, in
    `format` (None: detected), and searched as a database (`db.database.makedb`), which it also
    returns."""
    started, alphabet = time.perf_counter(), alphabet_name(alphabet)
    read, result = stream.StreamedFile(), None
    pieces = database.held_pieces(path, alphabet, shards, stream.piece_bytes(shard_memory))
    try:
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gpuhmm-pieces") as reader:
            ahead = reader.submit(next, pieces, None)
            try:
                while (piece := ahead.result()) is not None:
                    ahead, began = reader.submit(next, pieces, None), time.perf_counter() - started
                    found = _searched_once(piece, search)
                    result = result or SearchResult(hits_by_model=[[] for _ in found.hits_by_model])
                    result.extend(found, began)
                    read.sequences += piece.sequences
                    read.residues += piece.residues
                    read.shards += [(info.sequences, info.residues) for info in piece.shards]
            finally:  # the piece read ahead of a search that failed
                if ahead.exception() is None and (unsearched := ahead.result()) not in (None, piece):
                    database.release(unsearched)
    except NotPlain:
        whole = database.makedb(path, None, shards, alphabet=alphabet, format=format)
        return _searched_once(whole, search), whole
    result.wall_seconds = time.perf_counter() - started
    return result, read


def _searched_once(held, search):
    """`search(held)` of a database held in memory, then freed (`db.database.release`)."""
    try:
        return search(held)
    finally:
        database.release(held)
        STATE.shards.release(held)


class _Positions:
    """File positions (1-based) of a block's sequences whose first is at `first` (0-based): the
    first with a hit's name and length, indexed once for the block, when a hit first asks."""

    def __init__(self, block, first):
        self._block, self._first, self._index = block, first, None
        self._lock = threading.Lock()

    def __call__(self, hit):
        with self._lock:
            if self._index is None:
                self._index = {}
                for offset, sequence in enumerate(self._block):
                    self._index.setdefault((sequence_text(sequence)[0], len(sequence)), self._first + offset + 1)
        return self._index[hit_text(hit)[0], hit.length]


def _search_block(models, block, file_position, residues, alphabet, settings):
    """Every model against one `block` of `residues` (`file_position(hit)`: its sequence's, a
    `_Positions`): per model its kept hits and statistics, the seconds and CPU seconds taken,
    the residues."""
    started, started_cpu = time.perf_counter(), time.thread_time()
    pipeline = STATE.pipeline(alphabet, settings)
    kept = []
    for model in models:
        kept.append(tophits.as_hmmsearch_keeps(pipeline.search_hmm(model, block), file_position))
        pipeline.clear()
    return kept, time.perf_counter() - started, time.thread_time() - started_cpu, residues
