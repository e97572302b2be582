"""A `launch.TailBatch` through the tail's five stages (kernels/tail/stages.cuh): parse every pair,
sample every multi-domain region, rescore every envelope, assemble and serialize every pair.

The stages chain on the device: the queues between them (the regions found, each region's
envelopes, the records' offsets) are ordered, sized and laid out there, with `device.xp`
(CuPy, or numpy for the host build). The host reads back only what sizes the next launch: the
counts and arena bytes after stages 1 and 2, the records' bytes after stage 4, and at the end
the pairs' outcomes, each group in one wait. Each stage's items run costliest first (pairs by
their striped cells L·Q, regions by their residues, which their trace chains follow, envelopes
by their arenas; pairs and envelopes in units of one model's, launch.SAME_MODEL_ITEMS; the
longest pairs on a warp each, beside the others),
their arenas sized by what they hold (a region's or an envelope's residues, not the target's), in
as few launches as the arena budget allows. The models' pieces are the device's resident
copies, uploaded once per model.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from . import launch
from .launch import ENVELOPE_TASK_DTYPE, MAX_DOMAINS, MAX_ENVELOPES, OK, REGION_DTYPE, REGION_TASK_DTYPE

# The kernels, by launch.THREADS_PER_ITEM's index; stage 2 is REGIONS, TRACES then CLUSTERS.
PARSE, REGIONS, ENVELOPES, ASSEMBLE, SERIALIZE, TRACES, CLUSTERS, PARSE_WIDE, ENVELOPES_WIDE = range(9)
_EACH_REGION = 1 + 2 * MAX_ENVELOPES  # stage 2's output ints per region: the count, then (i, j)
_LAST = np.iinfo(np.int64).max  # a sort key that puts an unused slot last


def _chunks(sizes, budget):
    """Consecutive slices of items whose sizes add up to at most `budget` (one item at least)."""
    start, ends = 0, np.cumsum(sizes)
    while start < len(sizes):
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + budget, side="right")))
        yield start, stop
        start = stop


def _in_units(xp, cost, model, group):
    """An order of items by `cost` (costliest first) in units of `group` consecutive items (the
    kernel's launch.SAME_MODEL_ITEMS): each model's items, costliest first, cut `group` at a
    time (a unit spans two models only where one ends), the units costliest first by their
    first item; ties keep the items' order, on the host as on the device."""
    n = len(cost)
    by_cost = xp.argsort(-cost, kind="stable")
    order = by_cost[xp.argsort(model[by_cost].astype(np.int64) * n + xp.arange(n))]
    first = cost[order][::group]
    if n % group:  # a last, short unit goes last, so that every unit starts at a multiple of `group`
        first[-1] = first.min() - 1
    starts = xp.argsort(-first, kind="stable") * group
    positions = (starts[:, None] + xp.arange(group)).reshape(-1)
    return order[positions[positions < n]]


def _wide_first(xp, cost, wide, model, group):
    """An order of items: the `wide` ones (a warp each), costliest first, then the others in
    units of `group` (`_in_units`)."""
    first = xp.flatnonzero(wide)[xp.argsort(-cost[wide], kind="stable")]
    rest = xp.flatnonzero(~wide)
    return xp.concatenate([first, rest[_in_units(xp, cost[rest], model[rest], group)]])


def _striped_cells(residues, nodes, xp=np):
    """Residues × Q, the striped vectors of a lane's row: a lane's chain of cells."""
    return residues * xp.maximum(2, -(-nodes // 4))


def _pack(low, high):
    """Two non-negative int32 columns as the int64 of a struct that holds them side by side."""
    return low.astype(np.int64) | (high.astype(np.int64) << 32)


_FIELDS = {name for name, _ in launch.Tail._fields_}


class _Run:
    """One batch's device arrays (flat bytes, by name) and the `Tail` struct that points at them."""

    def __init__(self, batch, device):
        self.device, self.xp, self.arrays, self.struct = device, device.xp, {}, launch.Tail()
        npairs = self.npairs = len(batch.pairs)
        L, M = batch.pair_lengths(), batch.nodes()
        self.put(**batch.inputs())
        self.put(models=batch.models.table([device.address(device.resident(p)) for p in batch.models.pieces]))
        offsets = np.concatenate([[0], np.cumsum(launch.space_bytes(L, M))])
        cells = _striped_cells(L, M)
        wide = cells >= launch.WIDE_PAIR_CELLS
        self.nwide = int(wide.sum())
        pair_order = _wide_first(np, cells, wide, batch.pairs["model"], launch.SAME_MODEL_ITEMS[PARSE])
        # A region spans 2 residues at least; the kernel fails a pair whose regions do not fit.
        self.region_capacity = int(min((L // 2 + 1).sum(), np.iinfo(np.int32).max // REGION_DTYPE.itemsize))
        self.place("space", device.empty(int(offsets[-1])))
        self.place("regions", device.empty(self.region_capacity * REGION_DTYPE.itemsize))
        self.put(
            space_offsets=offsets[:-1].astype(np.uint64),
            pair_order=pair_order.astype(np.int32),
            state=np.zeros(npairs, launch.STATE_DTYPE),
            nfound=np.zeros(1, np.int32),
            nodes=M,
            lines=batch.lines(),
            pair_model=batch.pairs["model"],
        )
        self.place("item_ns", device.item_clocks)
        s = self.struct
        s.npairs, s.max_domains, s.region_capacity, s.nwide = npairs, MAX_DOMAINS, self.region_capacity, self.nwide
        s.settings = batch.settings(self.address("flogsum"))

    def place(self, name, array):
        """Keeps `array` (flat bytes; None: lets it go) and points the struct's field of that name at it."""
        self.arrays[name] = array
        if name in _FIELDS:
            setattr(self.struct, name, None if array is None else self.device.address(array))

    def put(self, **arrays):
        """Host arrays to the device."""
        for name, array in arrays.items():
            self.place(name, self.device.put(np.ascontiguousarray(array).view(np.uint8).reshape(-1)))

    def keep(self, **arrays):
        """Device arrays, as they are."""
        for name, array in arrays.items():
            self.place(name, self.xp.ascontiguousarray(array).view(np.uint8).reshape(-1))

    def view(self, name, dtype, *shape):
        return self.arrays[name].view(dtype).reshape(*shape) if shape else self.arrays[name].view(dtype)

    def address(self, name):
        return self.device.address(self.arrays[name])

    def launch(self, stage, count, beside=False):
        """Stage `stage` over `count` items; `beside`, beside the launches up to the next one not beside."""
        self.struct.ntasks = count
        if count:
            self.device.launch(stage, count, bytes(self.struct), beside)
        if not beside:
            self.device.join()

    def fetch(self, *arrays):
        """Device arrays to the host, after one wait."""
        return self.device.fetch(arrays)

    def in_launches(self, stage, tasks, sizes, total, budget, outputs, wide=0):
        """Stage `stage` over `tasks` (int64 rows, their struct's bytes; costliest first) whose
        arenas are `sizes` bytes (`total` in all), in as few launches as `budget` allows, the
        first `wide` on a warp each (`_WIDE`); `outputs` {field: (device array, its items per
        task)} are sliced along with the tasks."""
        name = "region_tasks" if stage == REGIONS else "envelope_tasks"
        chunks = [(0, len(tasks), 0, total)]
        if total > budget:  # sizes are read back only here, for the launches' bounds
            (sizes,) = self.fetch(sizes)
            ends = np.concatenate([[0], np.cumsum(sizes)])
            chunks = [(start, stop, int(ends[start]), int(ends[stop])) for start, stop in _chunks(sizes, budget)]
        for start, stop, base, end in chunks:
            chunk = tasks[start:stop].copy()
            chunk[:, _SCRATCH[stage]] -= base
            self.keep(**{name: chunk})
            for field, (array, each) in outputs.items():
                self.keep(**{field: array[start * each : stop * each]})
            self.place("arena", self.device.empty(end - base))
            self.struct.nwide = on_warps = min(max(wide - start, 0), stop - start)
            if on_warps:
                self.launch(_WIDE[stage], on_warps, beside=True)
            for kernel in _KERNELS[stage]:
                self.launch(kernel, stop - start - on_warps)
            self.place("arena", None)


# The int64 column of each task struct's `scratch` (RegionTask, EnvelopeTask), and the kernels of
# each stage, in order, over the same tasks and arenas.
_SCRATCH = {REGIONS: 2, ENVELOPES: 3}
_KERNELS = {REGIONS: (REGIONS, TRACES, CLUSTERS), ENVELOPES: (ENVELOPES,)}
_WIDE = {ENVELOPES: ENVELOPES_WIDE}


def run(batch, device, budget):
    """Every pair of `batch` through the five stages, each a function named as its kernels are
    (tail.cu); `budget` bounds one launch's arena bytes. Returns on the host each pair's `status`
    and `hits` (HIT_DTYPE), the serialized `records` (pair p's at record_offsets[p] ..
    record_offsets[p + 1], empty where it has no hit), and the stages' item counts (`items`)."""
    tail = _Run(batch, device)
    tail.launch(PARSE_WIDE, tail.nwide, beside=True)
    tail.launch(PARSE, tail.npairs - tail.nwide)
    regions = _regions(tail, budget)
    envelopes = _envelopes(tail, regions, budget)
    _assemble(tail, regions, envelopes)
    items = dict(
        pairs=tail.npairs, pairs_on_warps=tail.nwide, regions=regions.nfound, clustered=regions.nmulti,
        envelopes=envelopes.n, envelopes_on_warps=envelopes.nwide,
    )  # fmt: skip
    return dict(_serialize(tail), items=items)


def _regions(tail, budget):
    """Stage 2: the regions stage 1 found (`_found_regions`), and for the multi-domain ones,
    longest first, their Forward matrices, traces and clustering: each one's `status` and its
    `sampled` envelopes (a row at least, for indexing)."""
    xp, regions = tail.xp, _found_regions(tail)
    regions.sampled = xp.zeros((max(1, regions.nmulti), _EACH_REGION), np.int32)
    regions.status = xp.zeros(regions.nmulti, np.int32)
    if regions.nmulti:
        outputs = dict(region_status=(regions.status, 1), region_envelopes=(regions.sampled.reshape(-1), _EACH_REGION))
        tail.in_launches(REGIONS, regions.tasks, regions.sizes, regions.bytes, budget, outputs)
    return regions


def _envelopes(tail, regions, budget):
    """Stage 3: every envelope (`_envelope_tasks`) rescored, launched largest first; `rescored`
    in envelope order."""
    xp, envelopes = tail.xp, _envelope_tasks(tail, regions)
    n = envelopes.n = len(envelopes.tasks)
    tail.place("text", tail.device.empty(max(1, envelopes.text_bytes)))
    size = launch.RESCORED_DTYPE.itemsize
    envelopes.rescored = xp.zeros((n, size), np.uint8)
    if n:
        by_size = envelopes.tasks[envelopes.largest]
        by_size[:, 3] = xp.cumsum(by_size[:, 4]) - by_size[:, 4]
        done = xp.zeros((n, size), np.uint8)
        tail.in_launches(
            ENVELOPES,
            by_size,
            by_size[:, 4],
            envelopes.bytes,
            budget,
            dict(rescored=(done.reshape(-1), size)),
            envelopes.nwide,
        )
        envelopes.rescored[envelopes.largest] = done
    return envelopes


def _assemble(tail, regions, envelopes):
    """Stage 4: every pair. The first failing multi-domain region of a pair sends it to pyhmmer."""
    xp, npairs, nfound = tail.xp, tail.npairs, regions.nfound
    verdict = xp.zeros(npairs, np.int32)
    if regions.nmulti:
        row = regions.row
        status = regions.status[xp.maximum(row, 0)]
        failing = xp.sort(xp.where((row >= 0) & (status != OK), xp.arange(nfound), nfound))
        failing_pair = xp.where(failing < nfound, regions.pair[xp.minimum(failing, nfound - 1)], npairs)
        first = xp.minimum(xp.searchsorted(failing_pair, xp.arange(npairs)), nfound - 1)
        fails = failing_pair[first] == xp.arange(npairs)
        verdict = xp.where(fails, status[xp.minimum(failing[first], nfound - 1)], 0).astype(np.int32)
    tail.keep(
        envelope_tasks=envelopes.tasks,
        rescored=envelopes.rescored,
        envelope_first=xp.searchsorted(envelopes.pair, xp.arange(npairs + 1)).astype(np.int32),
        region_verdict=verdict,
        record_bytes=xp.zeros(npairs, np.uint64),
    )
    for name, nbytes in launch.output_bytes(npairs).items():
        tail.place(name, xp.zeros(nbytes, np.uint8))
    tail.launch(ASSEMBLE, npairs)


def _serialize(tail):
    """Stage 5: every hit's record, end to end; the outputs on the host."""
    xp = tail.xp
    record_bytes = tail.view("record_bytes", np.uint64).astype(np.int64)
    record_ends = xp.cumsum(record_bytes)
    (total,) = tail.fetch(record_ends[-1:])
    tail.keep(record_offsets=(record_ends - record_bytes).astype(np.uint64))
    tail.place("records", tail.device.empty(max(1, int(total[0]))))
    tail.launch(SERIALIZE, tail.npairs)
    status, hits, records, ends = tail.fetch(
        tail.arrays["status"], tail.arrays["hits"], tail.arrays["records"], record_ends
    )
    return dict(
        status=status.view(np.int32),
        hits=hits.view(launch.HIT_DTYPE),
        records=records[: int(total[0])],
        record_offsets=np.concatenate([[0], ends]),
    )


def _found_regions(tail):
    """The regions stage 1 found, on the device: `pair` of each in (pair, index) order, the
    slots of that order (`in_order`), each one's `row` of stage 2 (-1: a single-domain region),
    and stage 2's `tasks` (RegionTask rows, longest first) with their arena `sizes` and `bytes`."""
    xp, capacity = tail.xp, tail.region_capacity
    found = xp.minimum(tail.view("nfound", np.int32)[0], capacity)
    pair, index, i, j, multi = tail.view("regions", np.int32, capacity, 5).T
    used = xp.arange(capacity) < found  # the slots past the count hold nothing
    pair, i, j = (xp.where(used, column, 0) for column in (pair, i, j))
    clustered = used & (multi == 1)
    sizes = xp.where(clustered, launch.region_bytes(j - i + 1, tail.view("nodes", np.int64)[pair]), 0)
    in_order = xp.argsort(xp.where(used, _pack(index, pair), _LAST))
    largest = xp.argsort(xp.where(clustered, i - j - 1, 1))  # the longest first: the longest chains
    counts = xp.stack([found.astype(np.int64), clustered.sum(dtype=np.int64), sizes.sum(dtype=np.int64)])
    nfound, nmulti, total = (int(n) for n in tail.fetch(counts)[0])
    in_order, largest = in_order[:nfound], largest[:nmulti]
    tasks = xp.zeros((nmulti, REGION_TASK_DTYPE.itemsize // 8), np.int64)  # pair | i << 32, j, scratch, bytes
    tasks[:, 0], tasks[:, 1], tasks[:, 3] = _pack(pair[largest], i[largest]), j[largest], sizes[largest]
    tasks[:, 2] = xp.cumsum(tasks[:, 3]) - tasks[:, 3]
    row = xp.full(capacity, -1, np.int64)
    row[largest] = xp.arange(nmulti)
    return SimpleNamespace(
        nfound=nfound, nmulti=nmulti, pair=pair[in_order], index=index[in_order], i=i[in_order], j=j[in_order],
        row=row[in_order], tasks=tasks, sizes=tasks[:, 3], bytes=total,
    )  # fmt: skip


def _envelope_tasks(tail, regions):
    """Every envelope on the device, in pair, region and envelope order: a single-domain region's
    one, a multi-domain region's as stage 2 sampled them. `tasks` (EnvelopeTask rows),
    `pair` of each, `largest` (the order by arena size), `bytes` and `text_bytes` in all."""
    xp, nfound, nmulti = tail.xp, regions.nfound, regions.nmulti
    columns = ENVELOPE_TASK_DTYPE.itemsize // 8
    if not nfound:
        empty = xp.zeros(0, np.int64)
        return SimpleNamespace(
            tasks=xp.zeros((0, columns), np.int64), pair=empty, largest=empty, bytes=0, text_bytes=0, nwide=0
        )
    row = regions.row
    sampled = regions.sampled
    each = xp.where(row >= 0, sampled[xp.maximum(row, 0), 0], 1)
    ends = xp.cumsum(each.astype(np.int64))
    most = (nfound - nmulti) + MAX_ENVELOPES * nmulti  # every region's envelopes at most
    e = xp.arange(most)
    owner = xp.minimum(xp.searchsorted(ends, e, side="right"), nfound - 1)
    real = e < ends[-1]
    rank = xp.minimum(e - (ends[owner] - each[owner]), MAX_ENVELOPES - 1)
    from_stage_2, at = row[owner] >= 0, xp.maximum(row[owner], 0)
    env_i = xp.where(from_stage_2, sampled[at, 1 + 2 * rank], regions.i[owner])
    env_j = xp.where(from_stage_2, sampled[at, 2 + 2 * rank], regions.j[owner])
    pair = regions.pair[owner]
    M, lines = tail.view("nodes", np.int64)[pair], tail.view("lines", np.int64)[pair]
    Ld = xp.where(real, env_j - env_i + 1, 1)
    arena = xp.where(real, launch.envelope_bytes(Ld, M), 0)
    text = xp.where(real, launch.text_bytes(Ld, M, lines), 0)
    text_ends = xp.cumsum(text)
    tasks = xp.zeros((most, columns), np.int64)  # pair | region << 32, i | j << 32, clustered, ...
    tasks[:, 0], tasks[:, 1], tasks[:, 2] = _pack(pair, regions.index[owner]), _pack(env_i, env_j), from_stage_2
    tasks[:, 4], tasks[:, 5], tasks[:, 6] = arena, text_ends - text, text
    wide = real & (_striped_cells(Ld, M, xp) >= launch.WIDE_ENVELOPE_CELLS)
    counts = xp.stack([ends[-1], arena.sum(), text_ends[-1], wide.sum()])
    n, total, text_total, nwide = (int(v) for v in tail.fetch(counts)[0])
    model = tail.view("pair_model", np.int32)[pair[:n]]
    largest = _wide_first(xp, arena[:n], wide[:n], model, launch.SAME_MODEL_ITEMS[ENVELOPES])
    return SimpleNamespace(
        tasks=tasks[:n], pair=pair[:n], largest=largest, bytes=total, text_bytes=text_total, nwide=nwide
    )
