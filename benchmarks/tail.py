"""The stages after the Forward filter on the GPU (kernels/tail/): throughput and exactness
against pyhmmer on the same (model, target) pairs.

Run on the GPU machine, from the repository root:

    python benchmarks/tail.py --models benchmarks/data/pfam-subset-2766.h3m.xz \
        --proteome benchmarks/data/proteome-HG003687.faa

The pairs are the (model, protein) pairs pyhmmer reports a hit for among the models × the
proteome, each `--copies` times: the shape of the Forward filter's survivors on real proteins.
The GPU runs them through the tail's stages (`GpuEngine.tail`) in one call, `--repeats` times,
with each stage's kernel time, its longest item's time and the item counts; once more on the
bulk (all but the costliest 1 %) and on the costliest pair alone. Then the worker's
tail queue finishes them as a search does (`worker.tail.finish`), `--repeats` times: one task
per host thread, the GPU's feeders taking the pairs the GPU finishes sooner and the tasks'
threads, with pyhmmer, the most expensive ones. Both ways, the hits must equal pyhmmer's record
for record. The peer is pyhmmer searching exactly those pairs (each model against its own hit
sequences) with every host thread: its rate is what the GPU replaces.

Writes benchmarks/results/tail-<gpu>.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shlex
import sys
import threading
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyhmmer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpuhmm import SearchOptions  # noqa: E402
from gpuhmm.db.database import read_shards  # noqa: E402
from gpuhmm.engine.gpu import GpuEngine  # noqa: E402
from gpuhmm.hits import records  # noqa: E402
from gpuhmm.messages import PipelineSettings  # noqa: E402
from gpuhmm.stages import vitfilter  # noqa: E402
from gpuhmm.stages.tail import launch, readback, scores, serialized  # noqa: E402
from gpuhmm.stages.tail.profile import StripedProfile  # noqa: E402
from gpuhmm.worker import tail as worker_tail  # noqa: E402
from gpuhmm.worker.shards import ResidentShard  # noqa: E402
from gpuhmm.worker.tailqueue import TailQueue  # noqa: E402

from endtoend import default_threads, gpu_name, gpu_tag, open_models  # noqa: E402


def _hits(tophits):
    """Each hit's record, less the fields HMMER leaves unset (pyhmmer serializes stale memory)."""
    decoded = [records.decode_hit(bytes(raw)) for raw in tophits.__getstate__()["unsrt"]]
    return [
        dataclasses.replace(
            hit,
            window_length=0,
            seqidx=0,
            subseq_start=0,
            domains=tuple(dataclasses.replace(d, iorf=0, jorf=0) for d in hit.domains),
        )
        for hit in decoded
    ]


def queue_run(queue, pipelines, shard, hmms, profiles, pairs, pipeline_key, tasks):
    """(seconds, each model's TopHits, the tasks' stats summed, pairs the GPU finished): `pairs`
    (model, block position) finished through the worker's tail `queue` by `tasks` tasks, the
    models dealt round-robin, each on a thread of its own that waits for its job as a search's
    does; `pipelines(alphabet, arguments)` is the calling thread's pyhmmer Pipeline."""
    survivors = [[] for _ in hmms]
    for m, s in pairs:
        survivors[m].append(s)
    outcomes = []
    for m in range(len(hmms)):
        positions = np.sort(np.array(survivors[m], np.int64))
        null1 = np.array([scores.null_one(int(n)) for n in shard.lengths(positions)], np.float32)
        unscored = np.zeros(len(positions), bool)
        outcomes.append(
            types.SimpleNamespace(survivors=positions, survivor_filter_scores=null1, survivor_unscored=unscored)
        )
    found, stats, lock = [None] * len(hmms), {"pairs_on_gpu": 0}, threading.Lock()

    def task(first):
        models = range(first, len(hmms), tasks)
        striped = [types.SimpleNamespace(striped=profiles[m]) for m in models]
        hits, job_stats = worker_tail.finish(
            queue,
            shard,
            [hmms[m] for m in models],
            striped,
            [outcomes[m] for m in models],
            pipelines(*pipeline_key),
            pipeline_key,
        )
        with lock:
            for m, (tophits, on_gpu, _) in zip(models, hits):
                found[m] = tophits
                stats["pairs_on_gpu"] += on_gpu
            for name, value in job_stats.items():
                stats[name] = stats.get(name, 0) + value

    started = time.perf_counter()
    with ThreadPoolExecutor(tasks) as pool:
        list(pool.map(task, range(tasks)))
    return time.perf_counter() - started, found, stats


def workload(models, proteome, copies, threads, first=0):
    """The benchmark's pairs: the first `first` models (0: all) of `models`, the proteins of
    `proteome`, pyhmmer's options for them, and the (model, protein) pairs pyhmmer reports a hit
    for (on `threads` threads), each `copies` times, also as the arrays `pair_model` and
    `pair_sequence`."""
    alphabet = pyhmmer.easel.Alphabet.amino()
    with open_models(models) as handle:
        hmms = [hmm for m, hmm in enumerate(handle) if not first or m < first]
    with pyhmmer.easel.SequenceFile(str(proteome), digital=True, alphabet=alphabet) as handle:
        proteins = handle.read_block()
    index = {p.name: i for i, p in enumerate(proteins)}
    options = dict(bias_filter=False, Z=len(proteins))
    found = pyhmmer.hmmsearch(hmms, proteins, cpus=threads, **options)
    pairs = [(m, index[hit.name]) for m, hits in enumerate(found) for hit in hits] * copies
    pair_model, pair_sequence = (np.array(column) for column in zip(*pairs))
    return types.SimpleNamespace(
        alphabet=alphabet, hmms=hmms, proteins=proteins, options=options, pairs=pairs, pair_model=pair_model,
        pair_sequence=pair_sequence,
    )  # fmt: skip


def batch_builder(work):
    """`build(indices)`, the `launch.TailBatch` of those of `work`'s pairs (`workload`), with the
    models' striped `profiles` and TopHits `settings`, and the proteins' `lengths`."""
    alphabet, hmms, proteins = work.alphabet, work.hmms, work.proteins
    written = vitfilter.configured(hmms, pyhmmer.plan7.Background(alphabet))
    pieces = [np.asarray(p.sequence, dtype=np.uint8) for p in proteins]
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(np.int64)
    lengths = np.diff(offsets)
    settings = [records.pipeline_settings(pyhmmer.plan7.Pipeline(alphabet, **work.options), h) for h in hmms]
    profiles = [StripedProfile.from_configured(*configured) for configured in written]
    pack = launch.ModelPack(profiles)
    sequences = (np.concatenate(pieces), offsets, serialized.NameTable.of_sequences(proteins))
    null1 = np.array([scores.null_one(int(lengths[s])) for s in work.pair_sequence], np.float32)

    def build(indices):
        model, sequence = work.pair_model[indices], work.pair_sequence[indices]
        return launch.TailBatch.build(pack, sequences, model, sequence, null1[indices], settings, 42)

    return types.SimpleNamespace(build=build, profiles=profiles, settings=settings, lengths=lengths)


class _Pipelines:
    """Each thread's pyhmmer Pipeline, as a worker keeps them (`WorkerState.pipeline`)."""

    def __init__(self):
        self._local = threading.local()

    def __call__(self, alphabet, settings):
        if not hasattr(self._local, "pipeline"):
            self._local.pipeline = pyhmmer.plan7.Pipeline(alphabet, **settings.arguments())
        return self._local.pipeline


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--proteome", type=Path, required=True)
    parser.add_argument("--first", type=int, default=0, help="the first N models, 0 for all [0]")
    parser.add_argument("--copies", type=int, default=8, help="times each pair is run, GPU and peer [8]")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of the whole batch [2]")
    parser.add_argument("--calls", type=int, default=1, help="calls the pairs are cut into, run side by side [1]")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work = workload(args.models, args.proteome, args.copies, args.threads, args.first)
    alphabet, hmms, proteins, options, pairs = work.alphabet, work.hmms, work.proteins, work.options, work.pairs
    blocks = [
        pyhmmer.easel.DigitalSequenceBlock(alphabet, [proteins[s] for model, s in pairs if model == m])
        for m in range(len(hmms))
    ]

    def search(m):
        return pyhmmer.plan7.Pipeline(alphabet, **options).search_hmm(hmms[m], blocks[m])

    started = time.perf_counter()
    with ThreadPoolExecutor(args.threads) as pool:
        peer = list(pool.map(search, range(len(hmms))))
    peer_s = time.perf_counter() - started

    built = batch_builder(work)
    build, profiles, settings, lengths = built.build, built.profiles, built.settings, built.lengths
    pair_model, pair_sequence = work.pair_model, work.pair_sequence
    engine = GpuEngine()
    batches = [build(p) for p in np.array_split(np.arange(len(pairs)), args.calls)]
    engine.tail(batches[0])  # compiles the kernels
    runs = []
    for _ in range(args.repeats):
        timing, longest, outputs = {}, {}, []
        started = time.perf_counter()
        with ThreadPoolExecutor(args.calls) as pool:
            outputs = list(pool.map(engine.tail, batches, [timing] * len(batches), [longest] * len(batches)))
        seconds = time.perf_counter() - started
        items = {k: sum(o["items"][k] for o in outputs) for k in outputs[0]["items"]}
        runs.append(
            dict(
                seconds=round(seconds, 3),
                kernel_s={k: round(v, 3) for k, v in timing.items()},
                longest_item_s={k: round(v, 4) for k, v in longest.items()},
                items=items,
            )
        )
        print(json.dumps(runs[-1]), flush=True)
    # The bulk: the pairs but the costliest 1 %, whose rate the queue's GPU_COST_RATE states.
    cost = lengths[pair_sequence] * np.array([h.M for h in hmms])[pair_model]
    bulk = np.sort(np.argsort(cost, kind="stable")[: len(pairs) - len(pairs) // 100])
    bulk_batch = build(bulk)
    started = time.perf_counter()
    engine.tail(bulk_batch)
    bulk_s = time.perf_counter() - started
    # The costliest pair alone: each stage's serial chain with the GPU to itself.
    costliest = [int(np.argmax(cost))]
    alone = build(costliest)
    alone_s = {}
    engine.tail(alone, alone_s)
    pipelines = _Pipelines()
    queue = TailQueue(engine, pipelines, args.threads)
    shard = ResidentShard(read_shards(args.proteome, "amino", 1)[1][0], alphabet)
    pipeline_key = (alphabet, PipelineSettings.of(SearchOptions(Z=len(proteins), nobias=True)))
    queued = []
    for _ in range(args.repeats):
        seconds, by_queue, stats = queue_run(queue, pipelines, shard, hmms, profiles, pairs, pipeline_key, args.threads)
        queued.append(dict(seconds=round(seconds, 3), **{k: round(v, 3) for k, v in sorted(stats.items())}))
        print(json.dumps(queued[-1]), flush=True)
    results = [
        r for batch, output in zip(batches, outputs) for r in zip(batch.pairs, readback.read_back(batch, output))
    ]
    statuses = np.bincount([status for _, (status, _, _) in results], minlength=4).tolist()
    mine = {(int(p["model"]), int(p["sequence"])): record for p, (_, _, record) in results}
    identical = queue_identical = True
    for m, hmm in enumerate(hmms):
        ours = [mine[m, s] for model, s in pairs if model == m and mine.get((m, s)) is not None]
        rebuilt = records.tophits_of_buffers(hmm, ours, settings[m])
        identical &= _hits(rebuilt) == _hits(peer[m])
        queue_identical &= sorted(_hits(by_queue[m]), key=repr) == sorted(_hits(peer[m]), key=repr)
    cells = int(cost.sum())
    best = min(run["seconds"] for run in runs)
    queue_best = min(run["seconds"] for run in queued)
    fastest = min(runs, key=lambda run: run["seconds"])
    result = {
        "benchmark": "tail",
        "gpu": gpu_name()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *sys.argv]),
        "models": len(hmms),
        "pairs": len(pairs),
        "cells": cells,
        "statuses": dict(zip(("ok", "range", "capacity", "uncertain"), statuses)),
        "runs": runs,
        "kernel_s": fastest["kernel_s"],
        "longest_item_s": fastest["longest_item_s"],
        "items": fastest["items"],
        "gpu_pairs_per_s": round(len(pairs) / best, 1),
        "bulk": dict(
            pairs=len(bulk),
            cells=int(cost[bulk].sum()),
            seconds=round(bulk_s, 3),
            cells_per_s=int(cost[bulk].sum() / bulk_s),
        ),
        "costliest_alone": dict(
            M=int(hmms[pair_model[costliest[0]]].M),
            L=int(lengths[pair_sequence[costliest[0]]]),
            kernel_s={k: round(v, 4) for k, v in alone_s.items()},
        ),
        "queue_runs": queued,
        "queue_threads": args.threads,
        "queue_pairs_per_s": round(len(pairs) / queue_best, 1),
        "peer_threads": args.threads,
        "peer_s": round(peer_s, 3),
        "peer_pairs_per_s": round(len(pairs) / peer_s, 1),
        "hits_identical": bool(identical),
        "queue_hits_identical": bool(queue_identical),
    }
    out_path = args.out or Path(__file__).parent / "results" / f"tail-{gpu_tag(result['gpu'])}.json"
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
