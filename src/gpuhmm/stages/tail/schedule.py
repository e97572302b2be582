"""A `launch.TailBatch` through the tail's five stages (kernels/tail/stages.cuh): parse every pair,
sample every multi-domain region, rescore every envelope, assemble and serialize every pair.

Each stage's items are sized by what they hold (a region's or an envelope's residues, not the
target's) and run largest first, in as few launches as the arena budget allows. Between stages
the host reads back only the queues (the regions found, each region's envelopes) and the
records' sizes; at the end, the hits' numbers and their serialized records. `device`
is the engine's (`GpuEngine._TailDevice`) or the host build's, with the same methods over
cupy or numpy arrays; the models' pieces are its resident copies, uploaded once per model.
"""

from __future__ import annotations

import numpy as np

from . import launch
from .launch import ENVELOPE_TASK_DTYPE, MAX_DOMAINS, MAX_ENVELOPES, REGION_DTYPE, REGION_TASK_DTYPE

PARSE, REGIONS, ENVELOPES, ASSEMBLE, SERIALIZE = range(5)
_EACH_REGION = 1 + 2 * MAX_ENVELOPES  # stage 2's output ints per region: the count, then (i, j)


def _exclusive(sizes):
    return np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])


def _chunks(sizes, budget):
    """Consecutive slices of items whose sizes add up to at most `budget` (one item at least)."""
    start, ends = 0, np.cumsum(sizes)
    while start < len(sizes):
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + budget, side="right")))
        yield start, stop
        start = stop


_FIELDS = {name for name, _ in launch.Tail._fields_}


class _Run:
    """One batch's device arrays (flat bytes, by name) and the `Tail` struct that points at them."""

    def __init__(self, batch, device):
        self.device, self.arrays, self.struct = device, {}, launch.Tail()
        npairs = len(batch.pairs)
        L, M = batch.pair_lengths(), batch.nodes()
        self.put(**batch.inputs())
        self.put(models=batch.models.table([device.address(device.resident(p)) for p in batch.models.pieces]))
        offsets = _exclusive(launch.space_bytes(L, M))
        # A region spans 2 residues at least; the kernel fails a pair whose regions do not fit.
        self.region_capacity = int(min((L // 2 + 1).sum(), np.iinfo(np.int32).max // REGION_DTYPE.itemsize))
        self.place("space", device.empty(int(offsets[-1])))
        self.place("regions", device.empty(self.region_capacity * REGION_DTYPE.itemsize))
        self.put(
            space_offsets=offsets[:-1].astype(np.uint64),
            pair_order=np.lexsort((-L, batch.pairs["model"])).astype(np.int32),
            state=np.zeros(npairs, launch.STATE_DTYPE),
            nfound=np.zeros(1, np.int32),
        )
        s = self.struct
        s.npairs, s.max_domains, s.region_capacity = npairs, MAX_DOMAINS, self.region_capacity
        s.settings = batch.settings(self.address("flogsum"))

    def place(self, name, array):
        """Keeps `array` (None: lets it go) and points the struct's field of that name at it."""
        self.arrays[name] = array
        if name in _FIELDS:
            setattr(self.struct, name, None if array is None else self.device.address(array))

    def put(self, **arrays):
        for name, array in arrays.items():
            self.place(name, self.device.put(np.ascontiguousarray(array).view(np.uint8).reshape(-1)))

    def address(self, name):
        return self.device.address(self.arrays[name])

    def launch(self, stage, count):
        self.struct.ntasks = count
        if count:
            self.device.launch(stage, count, bytes(self.struct))

    def get(self, name, dtype, count=None):
        array = self.arrays[name]
        if count is not None:
            array = array[: count * np.dtype(dtype).itemsize]
        return self.device.get(array).view(dtype)


def run(batch, device, budget):
    """Every pair of `batch` through the five stages; `budget` bounds one launch's arena bytes.
    Returns on the host each pair's `status` and `hits` (HIT_DTYPE), the serialized `records`
    (pair p's at record_offsets[p] .. record_offsets[p + 1], empty where it has no hit), and the
    stages' item counts (`items`)."""
    npairs = len(batch.pairs)
    tail = _Run(batch, device)
    tail.launch(PARSE, npairs)
    found = min(int(tail.get("nfound", np.int32)[0]), tail.region_capacity)
    regions = tail.get("regions", REGION_DTYPE, found)
    regions = regions[np.lexsort((regions["index"], regions["pair"]))]
    M, lines = batch.nodes(), batch.lines()

    # Stage 2: the multi-domain regions, largest first.
    multi = regions[regions["multi"] == 1]
    region_sizes = launch.region_bytes(multi["j"] - multi["i"] + 1, M[multi["pair"]])
    by_size = np.argsort(-region_sizes, kind="stable")
    sampled = np.zeros((len(multi), _EACH_REGION), np.int32)
    region_status = np.zeros(len(multi), np.int32)
    for start, stop in _chunks(region_sizes[by_size], budget):
        chosen = by_size[start:stop]
        tasks = np.zeros(len(chosen), REGION_TASK_DTYPE)
        for field in ("pair", "i", "j"):
            tasks[field] = multi[field][chosen]
        offsets = _exclusive(region_sizes[chosen])
        tasks["scratch"], tasks["bytes"] = offsets[:-1], region_sizes[chosen]
        tail.put(
            region_tasks=tasks,
            region_status=np.zeros(len(chosen), np.int32),
            region_envelopes=np.zeros(len(chosen) * _EACH_REGION, np.int32),
        )
        tail.place("arena", device.empty(int(offsets[-1])))
        tail.launch(REGIONS, len(chosen))
        region_status[chosen] = tail.get("region_status", np.int32)
        sampled[chosen] = tail.get("region_envelopes", np.int32).reshape(len(chosen), _EACH_REGION)
        tail.place("arena", None)

    # Stage 3: every envelope, in pair, region and envelope order; launched largest first.
    single = regions[regions["multi"] == 0]
    counts = sampled[:, 0]
    owner = np.repeat(np.arange(len(multi)), counts)
    rank = np.arange(len(owner)) - np.repeat(_exclusive(counts)[:-1], counts)
    none = np.zeros(len(single), np.int32)
    pieces = [
        (single["pair"], single["index"], single["i"], single["j"], none, none),
        (
            multi["pair"][owner],
            multi["index"][owner],
            sampled[owner, 1 + 2 * rank],
            sampled[owner, 2 + 2 * rank],
            np.ones(len(owner), np.int32),
            rank,
        ),
    ]
    pair, region, i, j, clustered, ordinal = (np.concatenate(column) for column in zip(*pieces))
    order = np.lexsort((ordinal, region, pair))
    envelopes = np.zeros(len(order), ENVELOPE_TASK_DTYPE)
    for field, column in zip(("pair", "region", "i", "j", "clustered"), (pair, region, i, j, clustered)):
        envelopes[field] = column[order]
    Ld, Mp = envelopes["j"] - envelopes["i"] + 1, M[envelopes["pair"]]
    envelopes["bytes"] = launch.envelope_bytes(Ld, Mp)
    envelopes["text_bytes"] = launch.text_bytes(Ld, Mp, lines[envelopes["pair"]])
    envelopes["text"] = _exclusive(envelopes["text_bytes"])[:-1]
    tail.place("text", device.empty(int(envelopes["text_bytes"].sum())))
    size = launch.RESCORED_DTYPE.itemsize
    rescored = device.empty(len(envelopes) * size)
    by_size = np.argsort(-envelopes["bytes"].astype(np.int64), kind="stable")
    for start, stop in _chunks(envelopes["bytes"][by_size].astype(np.int64), budget):
        chosen = by_size[start:stop]
        tasks = envelopes[chosen]
        offsets = _exclusive(tasks["bytes"])
        tasks["scratch"] = offsets[:-1]
        tail.put(envelope_tasks=tasks)
        tail.place("rescored", device.empty(len(chosen) * size))
        tail.place("arena", device.empty(int(offsets[-1])))
        tail.launch(ENVELOPES, len(chosen))
        rescored.reshape(-1, size)[device.put(chosen)] = tail.arrays["rescored"].reshape(-1, size)
        tail.place("arena", None)

    # Stage 4: every pair.
    verdict = np.zeros(npairs, np.int32)
    failed = np.flatnonzero(region_status != launch.OK)
    failed = failed[np.lexsort((multi["index"][failed], multi["pair"][failed]))]
    first_failure = np.unique(multi["pair"][failed], return_index=True)
    verdict[first_failure[0]] = region_status[failed[first_failure[1]]]
    tail.place("rescored", rescored)
    tail.put(
        envelope_tasks=envelopes,
        envelope_first=np.searchsorted(envelopes["pair"], np.arange(npairs + 1)).astype(np.int32),
        region_verdict=verdict,
        **launch.output_arrays(npairs),
    )
    tail.put(record_bytes=np.zeros(npairs, np.uint64))
    tail.launch(ASSEMBLE, npairs)

    # Stage 5: every hit's record, end to end.
    offsets = _exclusive(tail.get("record_bytes", np.uint64))
    tail.put(record_offsets=offsets[:-1].astype(np.uint64))
    tail.place("records", device.empty(max(1, int(offsets[-1]))))
    tail.launch(SERIALIZE, npairs)
    outputs = dict(status=tail.get("status", np.int32), hits=tail.get("hits", launch.HIT_DTYPE))
    outputs["records"], outputs["record_offsets"] = tail.get("records", np.uint8), offsets
    outputs["items"] = dict(pairs=npairs, regions=len(regions), clustered=len(multi), envelopes=len(envelopes))
    return outputs
