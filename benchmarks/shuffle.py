#!/usr/bin/env python3
"""Shuffle significance (`--shuffle N`): the GPU against the CPU reference, same hits, same seed.

Run on the GPU machine, from the repository root:

    python benchmarks/shuffle.py --models tests/data/pfam-test.h3m.gz --sequences tests/data/proteins.faa

1. One CPU search (`--cut_ga`) gives the reported hits.
2. `gpuhmm.shuffle.significance` scores `--shuffles` shuffles of each of the first `--hits` hits'
   targets, plus the target, with the model's Viterbi filter on the GPU engine, timed from
   targets to rows. The CPU reference (the numpy engine) is far slower, so it scores only
   the first `--reference-hits` with `--reference-shuffles` each; the GPU scores the same,
   and the rows must be identical (bit-identical scores give identical fits).
3. Speed is compared per dynamic-programming cell (Σ M · L over every scored sequence).

Writes benchmarks/results/shuffle-<gpu>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpuhmm  # noqa: E402
from gpuhmm.db import database as seqdb  # noqa: E402
from gpuhmm.db import models  # noqa: E402
from gpuhmm.shuffle import significance  # noqa: E402

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


def timed_rows(hmms, hits, database, shuffles, seed, backend):
    started = time.perf_counter()
    rows = significance(hmms, hits, database, shuffles, seed, backend)
    return rows, time.perf_counter() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--sequences", type=Path, required=True)
    parser.add_argument("--hits", type=int, default=50, help="reported hits the GPU assesses [50]")
    parser.add_argument("--shuffles", type=int, default=1000, help="shuffles per hit [1000]")
    parser.add_argument(
        "--reference-hits", type=int, default=2, help="of those, hits the CPU reference assesses too [2]"
    )
    parser.add_argument(
        "--reference-shuffles", type=int, default=20, help="shuffles per hit for the CPU reference [20]"
    )
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--backend", choices=("gpu", "cpu"), default="gpu", help="cpu: a smoke test without a GPU")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

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
