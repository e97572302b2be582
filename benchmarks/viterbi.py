"""GPU Viterbi filter (kernels/vit.cu): exactness against HMMER's p7_ViterbiFilter and throughput.

Run on the GPU machine, from the repository root:

    python benchmarks/viterbi.py --models pfam-subset-1000.h3m.gz --proteome proteome.faa

1. Exactness: every third model × 20 random proteins, plus each model's `hmmemit` sample (a true
   hit; many overflow) and a long random sequence, through `filters.viterbi_filter` (Vit16,
   then Vit32 where Vit16 defers); scores must equal `viterbi_scores`, the numpy model
   of vitfilter.c checked bit for bit against HMMER 3.4.
2. Throughput: every model × 2,000 background sequences with the proteome's lengths (the shape
   of MSV survivors), all launches at once; TCUPS = Σ M·L over the pairs / kernel seconds.

Writes benchmarks/results/viterbi-<gpu>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np
import pyhmmer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpuhmm.engine import filters, tuning  # noqa: E402
from gpuhmm.engine.gpu import GpuEngine  # noqa: E402
from gpuhmm.engine.reference.vitfilter import viterbi_scores  # noqa: E402
from gpuhmm.stages import vitfilter  # noqa: E402

from benchdb import emitted  # noqa: E402

_reference = {}


def _reference_scores(model):
    profiles, sequences, pair_model, pair_sequence = _reference["case"]
    chosen = np.flatnonzero(pair_model == model)
    return chosen, viterbi_scores(profiles[model], [sequences[i] for i in pair_sequence[chosen]])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--proteome", type=Path, required=True)
    parser.add_argument("--pairs-per-model", type=int, default=2000)
    parser.add_argument("--throughput-only", action="store_true", help="skip the exactness check")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    alphabet = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.plan7.HMMFile(args.models) as handle:
        hmms = list(handle)
    with pyhmmer.easel.SequenceFile(str(args.proteome), digital=True, alphabet=alphabet) as handle:
        proteins = [np.asarray(s.sequence, dtype=np.uint8) for s in handle.read_block()]
    background = pyhmmer.plan7.Background(alphabet)
    profiles = vitfilter.viterbi_profiles(hmms, background)
    engine = GpuEngine()
    rng = np.random.default_rng(5)
    frequencies = np.asarray(background.residue_frequencies, dtype=np.float64)
    frequencies /= frequencies.sum()

    exactness = None
    if not args.throughput_only:
        hits = [np.asarray(s.sequence, dtype=np.uint8) for s in emitted(args.models, 1, 7, alphabet)]
        long_random = [rng.choice(20, size=n, p=frequencies).astype(np.uint8) for n in (5000, 20000, 60000)]
        sequences = proteins + hits + long_random
        offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences])]).astype(np.int64)
        shard = filters.FilterShard.build(np.concatenate(sequences), offsets, alphabet)
        pair_model, pair_sequence = [], []
        for m in range(0, len(hmms), 3):
            chosen = rng.choice(len(proteins), 20, replace=False).tolist()
            chosen += [len(proteins) + m, len(proteins) + len(hits) + m % 3]
            pair_model += [m] * len(chosen)
            pair_sequence += chosen
        pair_model, pair_sequence = np.array(pair_model), np.array(pair_sequence)
        started = time.perf_counter()
        got = filters.viterbi_filter(engine, profiles, shard, pair_model, pair_sequence)
        first_call = time.perf_counter() - started
        _reference["case"] = (profiles, sequences, pair_model, pair_sequence)
        expected = np.full(len(pair_model), np.nan, dtype=np.float32)
        with Pool() as pool:
            for chosen, scores in pool.imap_unordered(_reference_scores, np.unique(pair_model).tolist()):
                expected[chosen] = scores
        same = (got == expected) | (np.isinf(got) & np.isinf(expected) & (np.sign(got) == np.sign(expected)))
        print(f"exact: {int(same.sum())}/{len(same)} (overflows {int(np.isposinf(expected).sum())})", flush=True)
        exactness = {
            "pairs": len(same),
            "identical": int(same.sum()),
            "overflows": int(np.isposinf(expected).sum()),
            "first_call_s_with_compile": round(first_call, 2),
        }

    lengths = np.array([len(p) for p in proteins if len(p)])
    pool_lengths = rng.choice(lengths, 40000)
    residues = rng.choice(20, size=int(pool_lengths.sum()), p=frequencies).astype(np.uint8)
    pool_offsets = np.concatenate([[0], np.cumsum(pool_lengths)]).astype(np.int64)
    background_shard = filters.FilterShard.build(residues, pool_offsets, alphabet)
    n = args.pairs_per_model
    bench_model = np.repeat(np.arange(len(hmms)), n)
    bench_sequence = np.concatenate([rng.choice(len(pool_lengths), n, replace=False) for _ in hmms])
    nodes = np.array([p.M for p in profiles], dtype=np.int64)
    cells = int((nodes[bench_model] * pool_lengths[bench_sequence]).sum())
    seconds = []
    for _ in range(3):
        timing = []
        filters.viterbi_filter(engine, profiles, background_shard, bench_model, bench_sequence, timing)
        seconds.append(sum(timing))
    best = min(seconds)
    print(
        f"throughput: {cells / best / 1e12:.3f} TCUPS ({len(bench_model)} pairs, {cells} cells, {best:.4f} s)",
        flush=True,
    )
    gpu = engine.name
    short = "h100" if "H100" in gpu else "h200" if "H200" in gpu else gpu.split()[-1].lower()
    out = args.out or Path(__file__).parent / "results" / f"viterbi-{short}.json"
    out.write_text(
        json.dumps(
            {
                "benchmark": "viterbi",
                "gpu": gpu,
                "date": datetime.date.today().isoformat(),
                "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
                "tuning": tuning.table_for(engine.compute_capability)["viterbi"],
                "models": len(hmms),
                "exactness": exactness,
                "throughput": {
                    "pairs": len(bench_model),
                    "cells": cells,
                    "kernel_s": seconds,
                    "tcups": round(cells / best / 1e12, 3),
                },
            },
            indent=1,
        )
        + "\n"
    )
    print(f"written {out}")


if __name__ == "__main__":
    main()
