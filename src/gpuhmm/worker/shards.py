"""The database shards a worker keeps resident between tasks, in its memory and on its GPU."""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import threading

import numpy as np
import pyhmmer.plan7

from ..db.index import FirstPositions
from ..engine.filters import FilterOutcome, FilterShard, filter_stages
from ..hits.text import hit_text
from ..stages.tail.serialized import NameTable, take_ranges

log = logging.getLogger("gpuhmm")

#: What a pyhmmer DigitalSequence holds beside its residues (name, header, pointers), roughly.
PYHMMER_SEQUENCE_BYTES = 256


#: FilterOutcome fields that run beside `survivors`, one entry per survivor.
PER_SURVIVOR = ("survivor_filter_scores", "survivor_unscored")


class ResidentShard:
    """A shard as a worker keeps it: in database-file order, as hmmsearch reads targets.

    File order matters: see `hits.tophits`. `file_position` finds a hit's sequence by name and
    length; where a shard holds several such sequences it takes the first, the rule that keeps a
    hit whenever any of them would (`file_positions_among`: the first of those that could hit).
    The pyhmmer block of the whole shard (CPU backend), the name index and the filters' layout
    of the residues (GPU backend) are built on first use: the GPU backend gives pyhmmer only
    each model's survivors, so its first kernels need not wait.
    """

    def __init__(self, shard, alphabet):
        self._shard = shard
        self._alphabet = alphabet
        self._file_order = np.argsort(shard.source_index, kind="stable")
        self._block_position = np.empty(len(self._file_order), dtype=np.int64)
        self._block_position[self._file_order] = np.arange(len(self._file_order))
        self.sequences = len(self._file_order)
        self.residues = int(shard.offsets[-1])
        self._filter_shard = None
        self._filter_lock = threading.Lock()
        self._block = None
        self._positions = None
        self._lazy_lock = threading.Lock()

    def footprint(self):
        """Bytes this shard holds: its residues, what the filters laid out from them (the
        device holds about as much again) and the pyhmmer sequences of the whole shard."""
        total = self._shard.residues.nbytes + self._shard.offsets.nbytes
        if self._filter_shard is not None:
            total += self._filter_shard.footprint()
        if self._block is not None:
            total += self.residues + PYHMMER_SEQUENCE_BYTES * self.sequences
        return total

    @property
    def block(self):
        with self._lazy_lock:
            if self._block is None:
                self._block = self._shard.to_block(self._alphabet, self._file_order)
            return self._block

    def piece(self, piece, pieces):
        """The `piece`-th of `pieces` runs of consecutive sequences of the block (file order)."""
        if pieces == 1:
            return self.block
        return self.block[piece * self.sequences // pieces : (piece + 1) * self.sequences // pieces]

    def source_index(self, position):
        """The file position of the sequence at block `position`."""
        return int(self._shard.source_index[self._file_order[position]])

    def subset(self, positions):
        """The sequences at block `positions` (ascending: file order) as a pyhmmer block."""
        return self._shard.to_block(self._alphabet, self._file_order[positions])

    def file_position(self, hit):
        with self._lazy_lock:
            if self._positions is None:
                self._positions = FirstPositions(self._shard)
        return self._positions.find(hit_text(hit)[0], hit.length)

    def file_positions_among(self, positions):
        """`file_position` for hits of the sequences at block `positions` (ascending) alone, as
        a filtered model's hits are of its survivors: their own index, built when first asked."""
        index = {}

        def file_position(hit):
            if not index:
                members, names = self._file_order[positions], self._shard.names
                sources, lengths = self._shard.source_index[members].tolist(), self.lengths(positions).tolist()
                for member, length, source in zip(members.tolist(), lengths, sources):
                    index.setdefault((names[member], length), source + 1)
            return index[hit_text(hit)[0], hit.length]

        return file_position

    def filter(self, engine, models, settings, timings, sieve_slots=None):
        """Per model (`worker.models.FilterModel`), its `FilterOutcome` on this shard under the
        pipeline's `settings` (messages.PipelineSettings), with the sequences as block positions
        (file order), ascending."""
        with self._filter_lock:
            if self._filter_shard is None:
                self._filter_shard = FilterShard.build(self._shard.residues, self._shard.offsets, self._alphabet)
        results = filter_stages(
            engine,
            [m.msv for m in models],
            [m.viterbi for m in models],
            [m.forward for m in models],
            pyhmmer.plan7.Background(self._alphabet).residue_frequencies,
            self._filter_shard,
            settings.F1,
            settings.F2,
            settings.F3,
            settings.bias_filter,
            timings,
            sieve_slots,
        )
        in_file_order = []
        for result in results:
            fields = {field.name: getattr(result, field.name) for field in dataclasses.fields(result)}
            order = np.argsort(self._block_position[result.survivors], kind="stable")
            for name in PER_SURVIVOR:
                fields[name] = fields[name][order]
            for name in fields.keys() - set(PER_SURVIVOR):
                fields[name] = np.sort(self._block_position[fields[name]])
            in_file_order.append(FilterOutcome(**fields))
        return in_file_order

    def lengths(self, positions):
        """The lengths of the sequences at block `positions`."""
        shard_index = self._file_order[positions]
        return self._shard.offsets[shard_index + 1] - self._shard.offsets[shard_index]

    def tail_names(self, positions):
        """The `serialized.NameTable` of the sequences at block `positions`: name, accession and
        description each, as `hits.text.sequence_text` reads them from their pyhmmer sequences."""
        shard = self._shard
        texts = (shard.names, shard.accessions, shard.descriptions)
        return NameTable(
            (column[i] or b"") if column else b"" for i in self._file_order[positions].tolist() for column in texts
        )

    def tail_sequences(self, positions):
        """(residues, offsets) of the sequences at block `positions`, one after another."""
        return take_ranges(self._shard.residues, self._shard.offsets, self._file_order[positions])


class ResidentShards:
    """The database shards a worker keeps, for every model group that needs them: in its memory
    and, on the GPU backend, on its device (a shard's device data lives as long as the shard
    does). Least recently used shards go first once their footprint passes the budget; one that
    a task still uses stays until that task ends. Keyed by checksum as well as path, so a
    rebuilt database is never served stale."""

    def __init__(self, default_budget):
        self.budget = None  # bytes; None: `default_budget(backend)`
        self.loads = 0
        self._default_budget = default_budget
        self._shards = collections.OrderedDict()  # key → {"lock", "shard"}
        self._lock = threading.Lock()

    def get(self, database, index, backend):
        key = (str(database.path), index, database.shards[index].sha256)
        with self._lock:
            entry = self._shards.setdefault(key, {"lock": threading.Lock(), "shard": None})
            self._shards.move_to_end(key)
        with entry["lock"]:
            loaded = entry["shard"] is None
            if loaded:
                entry["shard"] = ResidentShard(database.load_shard(index), database.alphabet)
        if loaded:  # the held memory grows most with a new shard: only then is the budget checked
            with self._lock:
                self.loads += 1
            self._keep_within_budget(key, backend)
        return entry["shard"]

    def _keep_within_budget(self, newest, backend):
        budget = self.budget if self.budget is not None else self._default_budget(backend)
        with self._lock:
            footprints = {key: entry["shard"].footprint() for key, entry in self._shards.items() if entry["shard"]}
            total = sum(footprints.values())
            for key in [key for key in self._shards if key != newest]:
                if total <= budget:
                    break
                self._shards.pop(key)
                total -= footprints.get(key, 0)
                log.info(
                    "database shard %d of %s leaves this worker's memory (shards held: %.2f GB, budget %.2f GB)",
                    key[1],
                    key[0],
                    total / 1e9,
                    budget / 1e9,
                )

    def release(self, database):
        """Let every shard of `database` go."""
        with self._lock:
            for key in [key for key in self._shards if key[0] == str(database.path)]:
                self._shards.pop(key)


def host_memory_bytes():
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
