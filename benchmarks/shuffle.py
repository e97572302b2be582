#!/usr/bin/env python3
"""Shuffle significance (`--shuffle N`): the GPU against the CPU path, or the CPU path against pyhmmer.

Run from the repository root, on the GPU machine:

    python benchmarks/shuffle.py --models tests/data/pfam-test.h3m.gz --sequences tests/data/proteins.faa

1. One CPU search (`--cut_ga`) gives the reported hits.
2. `gpuhmm.shuffle.significance` scores `--shuffles` shuffles of each of the first `--hits` hits'
   targets, plus the target, with the model's Viterbi filter on the GPU engine, timed from
   targets to rows. The CPU path (the compiled Viterbi filter, one thread) scores the first
   `--reference-hits` with `--reference-shuffles` each; the GPU scores the same, and the rows
   must be identical (bit-identical scores give identical fits).
3. Speed is compared per dynamic-programming cell (Σ M · L over every scored sequence).

Writes benchmarks/results/shuffle-<gpu>.json.

With `--cpu` (no GPU needed), the CPU path against a compiled peer over every reported hit:

    python benchmarks/shuffle.py --cpu --shuffles 200 --models tests/data/pfam-test.h3m.gz \
        --sequences tests/data/proteins.faa

* `significance`: `gpuhmm.shuffle.significance` on the CPU backend, from targets to rows
  (shuffling, the compiled Viterbi filter, the Gumbel fits), on 1 thread and on `--cpus`.
* `viterbi`: the compiled Viterbi filter alone (`engine.vitcpu.scores`) over the same shuffled
  targets, drawn beforehand, 1 thread and `--cpus` (a hit per task).
* `peer_msv_viterbi`: pyhmmer 0.12.3 exposes no Viterbi filter call, so the peer is its
  `Pipeline.search_hmm` with F1 = 1 (every sequence passes MSV), F2 = F3 = 0 (none passes
  Viterbi) and no bias filter: HMMER's SSE MSV and Viterbi filters on every shuffled sequence,
  one pipeline per thread. `peer_msv` is the same with F1 = 0 (MSV alone); their difference
  estimates HMMER's Viterbi filter by itself (`peer_viterbi_estimate`).
* The compiled scores must equal the numpy reference (`viterbi_scores`) on a sample.

Writes benchmarks/results/shuffle-cpu-<host>.json (CPU model, date, command).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyhmmer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpuhmm  # noqa: E402
from gpuhmm.db import database as seqdb  # noqa: E402
from gpuhmm.db import models  # noqa: E402
from gpuhmm.engine import vitcpu  # noqa: E402
from gpuhmm.engine.reference.vitfilter import viterbi_scores  # noqa: E402
from gpuhmm.shuffle import shuffles, significance  # noqa: E402
from gpuhmm.stages import vitfilter  # noqa: E402
from gpuhmm.stages.msvfilter import configured_profile  # noqa: E402

from cpu_vs_pyhmmer import cpu_model, default_cpus, host_tag  # noqa: E402
from endtoend import gpu_name, gpu_tag  # noqa: E402


def first_reported(hits, count):
    """Copies of the TopHits with only the first `count` reported hits (models in order) still
    reported, and the dynamic-programming cells of scoring each once."""
    kept, left, cells = [], count, 0
    for model_hits in hits:
        copy = model_hits.copy()
        for index, hit in enumerate(list(copy.reported)):
            if index >= left:
                hit.reported = False
            else:
                cells += model_hits.query.M * hit.length
        left -= min(left, len(model_hits.reported))
        kept.append(copy)
    return kept, cells


def timed_rows(hmms, hits, database, shuffles, seed, backend, threads=1):
    started = time.perf_counter()
    rows = significance(hmms, hits, database, shuffles, seed, backend, threads)
    return rows, time.perf_counter() - started


def shuffled_targets(hmms, hits, sequences, count, seed):
    """Per reported hit, (model index, its `count` shuffled targets (count, L) uint8), drawn as
    `significance` draws them: seeded by the model's position and the target's in the file."""
    with pyhmmer.easel.SequenceFile(str(sequences), digital=True, alphabet=hmms[0].alphabet) as handle:
        block = handle.read_block()
    first = {}
    for position, sequence in enumerate(block):
        first.setdefault((sequence.name, len(sequence)), position)
    targets = []
    for model, model_hits in enumerate(hits):
        for hit in model_hits.reported:
            position = first[(hit.name, hit.length)]
            codes = np.asarray(block[position].sequence, dtype=np.uint8)
            targets.append((model, shuffles(codes, count, seed, model, position)))
    return targets


def threaded(function, items, threads):
    """Seconds to run function(item) for every item on `threads` threads, and the results."""
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(function, items))
    return time.perf_counter() - started, results


def peer_search(alphabet, F1):
    """pyhmmer's pipeline on one hit's shuffles, a pipeline per thread: MSV on every sequence,
    then (F1 = 1) the Viterbi filter on every sequence, which none passes (F2 = 0)."""
    local = threading.local()

    def search(item):
        optimized, block = item
        if not hasattr(local, "pipeline"):
            local.pipeline = pyhmmer.plan7.Pipeline(alphabet, F1=F1, F2=0.0, F3=0.0, bias_filter=False)
        local.pipeline.search_hmm(optimized, block)
        local.pipeline.clear()

    return search


def rate(seconds, threads, sequences, cells):
    return {
        "threads": threads,
        "seconds": round(seconds, 3),
        "shuffles_per_s": round(sequences / seconds),
        "gcups": float(f"{cells / seconds / 1e9:.4g}"),
    }


def compiler():
    try:
        found = subprocess.run([*vitcpu._compiler(), "--version"], capture_output=True, text=True, check=True)
        return found.stdout.splitlines()[0]
    except (OSError, subprocess.CalledProcessError):
        return None


def cpu_main(args):
    """The CPU path against pyhmmer's filters over the same shuffled targets (`--cpu`)."""
    out = args.out or HERE / "results" / f"shuffle-cpu-{host_tag()}.json"
    hmms = models.read_models(args.models)
    hits = gpuhmm.hmmsearch(
        args.models, args.sequences, gpuhmm.SearchOptions(cut="ga"), engine=gpuhmm.EngineSettings(backend="cpu")
    )
    alphabet = hmms[0].alphabet
    background = pyhmmer.plan7.Background(alphabet)
    profiles = vitfilter.viterbi_profiles(hmms, background)
    optimized = [configured_profile(hmm, background) for hmm in hmms]
    targets = shuffled_targets(hmms, hits, args.sequences, args.shuffles, args.seed)
    sequences = len(targets) * args.shuffles
    cells = sum(hmms[model].M * drawn.size for model, drawn in targets)
    blocks = [
        (
            optimized[model],
            pyhmmer.easel.DigitalSequenceBlock(
                alphabet,
                [
                    pyhmmer.easel.DigitalSequence(alphabet, name=f"s{i}".encode(), sequence=np.ascontiguousarray(row))
                    for i, row in enumerate(drawn)
                ],
            ),
        )
        for model, drawn in targets
    ]
    sample = [(profiles[model], drawn[:20]) for model, drawn in targets[:5]]
    exact = all(
        np.array_equal(
            vitcpu.scores(profile, drawn).view(np.int32), viterbi_scores(profile, list(drawn)).view(np.int32)
        )
        for profile, drawn in sample
    )
    database = seqdb.makedb(args.sequences, None)
    result = {
        "benchmark": "shuffle-cpu",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
        "host": {
            "cpus": args.cpus,
            "cpu_model": cpu_model(),
            "load_average_at_start": [round(load, 2) for load in os.getloadavg()],
            "compiler": compiler(),
            "pyhmmer": pyhmmer.__version__,
        },
        "hits": len(targets),
        "shuffles_per_hit": args.shuffles,
        "cells": cells,
        "scores_equal_numpy_reference_on_sample": exact,
    }
    try:
        timed_rows(hmms, hits, database, 2, args.seed, "cpu")  # compiles the Viterbi filter once
        for name, function, items in [
            ("viterbi", lambda item: vitcpu.scores(profiles[item[0]], item[1]), targets),
            ("peer_msv_viterbi", peer_search(alphabet, 1.0), blocks),
            ("peer_msv", peer_search(alphabet, 0.0), blocks),
        ]:
            result[name] = [rate(threaded(function, items, n)[0], n, sequences, cells) for n in (1, args.cpus)]
        rows = {}
        result["significance"] = []
        for threads in (1, args.cpus):
            rows[threads], seconds = timed_rows(hmms, hits, database, args.shuffles, args.seed, "cpu", threads)
            result["significance"].append(rate(seconds, threads, sequences, cells))
    finally:
        seqdb.release(database)
    result["rows_identical_across_threads"] = rows[1] == rows[args.cpus]
    result["peer_viterbi_estimate"] = [
        rate(both["seconds"] - msv["seconds"], both["threads"], sequences, cells)
        for both, msv in zip(result["peer_msv_viterbi"], result["peer_msv"])
    ]
    result["viterbi_vs_peer_msv_viterbi"] = [
        round(peer["seconds"] / ours["seconds"], 2) for ours, peer in zip(result["viterbi"], result["peer_msv_viterbi"])
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--sequences", type=Path, required=True)
    parser.add_argument("--hits", type=int, default=50, help="reported hits the GPU assesses [50]")
    parser.add_argument("--shuffles", type=int, default=1000, help="shuffles per hit [1000]")
    parser.add_argument("--reference-hits", type=int, default=2, help="of those, hits the CPU path assesses too [2]")
    parser.add_argument("--reference-shuffles", type=int, default=20, help="shuffles per hit for the CPU path [20]")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--backend", choices=("gpu", "cpu"), default="gpu", help="cpu: a smoke test without a GPU")
    parser.add_argument("--cpu", action="store_true", help="the CPU path against pyhmmer, every reported hit")
    parser.add_argument("--cpus", type=int, default=default_cpus(), help="threads with --cpu [the affinity mask]")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.cpu:
        return cpu_main(args)

    name, driver = gpu_name()
    out = args.out or HERE / "results" / f"shuffle-{gpu_tag(name) or 'gpu'}.json"
    hmms = models.read_models(args.models)
    hits = gpuhmm.hmmsearch(
        args.models, args.sequences, gpuhmm.SearchOptions(cut="ga"), engine=gpuhmm.EngineSettings(backend="cpu")
    )
    full, full_cells = first_reported(hits, args.hits)
    subset, subset_cells = first_reported(hits, args.reference_hits)
    database = seqdb.makedb(args.sequences, None)
    try:
        timed_rows(hmms, subset, database, 2, args.seed, args.backend)  # loads the kernels
        fast, fast_s = timed_rows(hmms, full, database, args.shuffles, args.seed, args.backend)
        fast_subset, _ = timed_rows(hmms, subset, database, args.reference_shuffles, args.seed, args.backend)
        reference, reference_s = timed_rows(hmms, subset, database, args.reference_shuffles, args.seed, "cpu")
    finally:
        seqdb.release(database)
    fast_rate = full_cells * (args.shuffles + 1) / fast_s
    reference_rate = subset_cells * (args.reference_shuffles + 1) / reference_s
    result = {
        "benchmark": "shuffle",
        "gpu": name,
        "gpu_driver": driver,
        "backend": args.backend,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
        "hits": sum(len(model_hits.reported) for model_hits in full),
        "shuffles_per_hit": args.shuffles,
        "seconds": round(fast_s, 3),
        "gcups": float(f"{fast_rate / 1e9:.4g}"),
        "reference": {
            "hits": sum(len(model_hits.reported) for model_hits in subset),
            "shuffles_per_hit": args.reference_shuffles,
            "seconds": round(reference_s, 3),
            "gcups": float(f"{reference_rate / 1e9:.4g}"),
        },
        "speedup_vs_cpu_reference": round(fast_rate / reference_rate, 1),
        "rows_identical_to_reference": fast_subset == reference,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
