"""GPU SSV/MSV kernels: exactness against pyhmmer and throughput across model lengths.

Run on the GPU machine, from the repository root:

    python benchmarks/kernels.py --models pfam-subset-1000.h3m.gz --proteome proteome.faa

1. Exactness: every model × the proteome, plus random sequences of lengths 1…100,000, through
   the GPU F1 stage; scores must equal `OptimizedProfile.msv_filter` bit for bit (overflow as
   +inf), and each model's pass count must equal pyhmmer's pipeline "Passed MSV filter".
2. Throughput: for real Pfam models of lengths 10…2400, SSV and MSV over a database of at
   least 100M residues (benchdb.py), in TCUPS = models × M × residues / kernel seconds.
3. The peer: `pyhmmer.hmmsearch` with every host thread, on the same host, in GCUPS.

Writes benchmarks/results/kernels-<gpu>.json and a PNG of TCUPS against model length.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import pyhmmer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpuhmm.engine import filters, tuning  # noqa: E402
from gpuhmm.engine.gpu import GpuEngine  # noqa: E402
from gpuhmm.stages import msvfilter  # noqa: E402

from benchdb import make_database, read_digital  # noqa: E402

LENGTHS = (10, 25, 50, 75, 100, 150, 200, 300, 400, 600, 800, 1000, 1200, 1600, 2000, 2400)


def pyhmmer_scores(hmm, sequences):
    background = pyhmmer.plan7.Background(hmm.alphabet)
    profile = pyhmmer.plan7.Profile(hmm.M, hmm.alphabet)
    profile.configure(hmm, background, L=400)
    optimized = profile.to_optimized()
    scores = np.zeros(len(sequences), dtype=np.float32)
    for index, sequence in enumerate(sequences):
        if len(sequence) == 0:
            scores[index] = np.nan
            continue
        optimized.L = len(sequence)
        scores[index] = optimized.msv_filter(sequence)
    return scores


def n_past_msv(hmm, block):
    hits = pyhmmer.plan7.Pipeline(hmm.alphabet).search_hmm(hmm, block)
    return hits.__getstate__()["pipeline"]["n_past_msv"]


def check_exact(engine, hmms, sequences, threads, label):
    alphabet = hmms[0].alphabet
    lengths = [len(s.sequence) for s in sequences]
    residues = np.concatenate([np.asarray(s.sequence, dtype=np.uint8) for s in sequences])
    shard = filters.FilterShard.build(residues, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), alphabet)
    models = msvfilter.msv_models(hmms)
    started = time.perf_counter()
    scores = np.full((len(models), shard.sequences), np.nan, dtype=np.float32)  # F1 = 1: every score
    passed = np.zeros((len(models), shard.sequences), dtype=bool)
    undecided = 0
    for start in range(0, len(models), 256):
        every = filters.f1_filter(engine, models[start : start + 256], shard, 1.0)
        scores[start + every.pair_model, every.pair_sequence] = every.scores
        undecided += len(every.undecided_model)
        chosen = filters.f1_filter(engine, models[start : start + 256], shard, 0.02)
        passed[start + chosen.pair_model, chosen.pair_sequence] = True
    gpu_seconds = time.perf_counter() - started
    block = pyhmmer.easel.DigitalSequenceBlock(alphabet, sequences)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        expected = list(pool.map(lambda hmm: pyhmmer_scores(hmm, sequences), hmms))
        counts = list(pool.map(lambda hmm: n_past_msv(hmm, block), hmms))
    nonempty = shard.lengths > 0
    pairs = identical = passes_identical = 0
    mismatches = []
    for hmm, model, got, got_passed, reference, count in zip(hmms, models, scores, passed, expected, counts):
        same = (got == reference) | (np.isinf(got) & np.isinf(reference))
        same = same[nonempty]
        reference_pass = (msvfilter.gumbel_pvalues(reference, shard.null1, model.mu, model.lam) <= 0.02) & nonempty
        pass_same = np.array_equal(reference_pass, got_passed) and int(got_passed.sum()) == count
        pairs += int(nonempty.sum())
        identical += int(same.sum())
        passes_identical += pass_same
        if not same.all() or not pass_same:
            mismatches.append(
                {
                    "model": hmm.name,
                    "M": hmm.M,
                    "score_mismatches": int((~same).sum()),
                    "gpu_pass": int(got_passed.sum()),
                    "pyhmmer_pass": count,
                }
            )
    print(
        f"[exact:{label}] {identical}/{pairs} scores identical, {passes_identical}/{len(hmms)} pass sets; "
        f"gpu filter {gpu_seconds:.1f} s",
        flush=True,
    )
    return {
        "pairs": pairs,
        "identical": identical,
        "models": len(hmms),
        "pass_sets_identical": passes_identical,
        "overflows": int(np.isinf(scores).sum()),
        "ssv_undecided": undecided,
        "mismatches": mismatches[:20],
    }


def random_sequences(alphabet, count, seed):
    rng = np.random.default_rng(seed)
    lengths = np.unique(np.round(np.exp(rng.uniform(0, math.log(100_000), count))).astype(int))
    lengths = sorted(set(lengths.tolist()) | {1, 2, 100_000})
    frequencies = np.asarray(pyhmmer.plan7.Background(alphabet).residue_frequencies, dtype=np.float64)
    frequencies /= frequencies.sum()
    return [
        pyhmmer.easel.DigitalSequence(
            alphabet, name=f"random{n}".encode(), sequence=rng.choice(20, size=n, p=frequencies).astype(np.uint8)
        )
        for n in lengths
    ]


def pick_models(hmms, lengths):
    """The real model nearest each length; past the longest real one, a model sampled by
    pyhmmer at that length (the subsets stop near M = 1100; throughput needs only M)."""
    chosen = []
    longest = max(h.M for h in hmms)
    for target in lengths:
        if target > longest * 1.1:
            hmm = pyhmmer.plan7.HMM.sample(hmms[0].alphabet, target, pyhmmer.easel.Randomness(target))
            hmm.name = f"sampled-M{target}"
        else:
            hmm = min(hmms, key=lambda h: (abs(h.M - target), h.name))
        if hmm not in chosen:
            chosen.append(hmm)
    return chosen


def time_launch(engine, choice, blocks, models, tjb, sequences, repeats=3):
    """Median kernel time in seconds over `repeats` launches of `choice`'s stage, after one warm-up."""
    cuda = engine.xp.cuda
    with engine._stream():
        call, _ = engine._prepare(choice, blocks, engine._tables(choice, models), tjb, sequences)
        call()
        events = [(cuda.Event(), cuda.Event()) for _ in range(repeats)]
        for start, stop in events:
            start.record()
            call()
            stop.record()
        events[-1][1].synchronize()
        return float(np.median([cuda.get_elapsed_time(a, b) / 1000.0 for a, b in events]))


def throughput(engine, hmms, shard, batch, repeats):
    rows = []
    for hmm in hmms:
        model = msvfilter.msv_models([hmm])[0]
        for stage in ("ssv", "msv"):
            choice = tuning.choose(model.M, stage, engine.compute_capability)
            limits = tuning.table_for(engine.compute_capability)[stage]
            blocks = shard.warp_blocks(choice.striping.S, engine.warps(limits["warps_per_sm"]))
            seconds = time_launch(engine, choice, blocks, [model] * batch, shard.tjb, shard.sequences, repeats)
            tcups = batch * model.M * blocks.residues / seconds / 1e12
            # Padding ('#' and '@') per real residue, as in CUDAMPF++ Table 2; the tallest warp
            # block over the mean height (1.0: a perfect balance).
            padding = (int(blocks.heights.sum()) * blocks.S - blocks.residues) / max(1, blocks.residues)
            balance = float(blocks.heights.max() / max(1e-9, blocks.heights.mean())) if blocks.warps else 1.0
            rows.append(
                {
                    "stage": stage,
                    "M": model.M,
                    "model": hmm.name,
                    "lanes": choice.striping.S,
                    "H": choice.striping.H,
                    "cta_warps": choice.cta_warps,
                    "arithmetic": choice.arithmetic,
                    "seconds": seconds,
                    "tcups": round(tcups, 3),
                    "padding_ratio": round(padding, 4),
                    "warp_balance": round(balance, 4),
                }
            )
            print(
                f"[tput] {stage} M={model.M:5d} S={choice.striping.S:2d} H={choice.striping.H:3d} "
                f"{tcups:6.2f} TCUPS pad={padding:.3f} balance={balance:.3f}",
                flush=True,
            )
    return rows


def peer(hmms, digital, threads):
    alphabet = hmms[0].alphabet
    block = pyhmmer.easel.DigitalSequenceBlock(alphabet, digital)
    residues = sum(len(s) for s in digital)
    started = time.perf_counter()
    for _ in pyhmmer.hmmsearch(hmms, block, cpus=threads):
        pass
    seconds = time.perf_counter() - started
    cells = sum(h.M for h in hmms) * residues
    return {
        "name": f"pyhmmer.hmmsearch {pyhmmer.__version__}",
        "threads": threads,
        "gcups": round(cells / seconds / 1e9, 2),
        "seconds": round(seconds, 3),
        "residues": residues,
    }


def plot(rows, peer_row, path, gpu):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.2))
    for stage, marker in (("ssv", "o"), ("msv", "s")):
        points = sorted((r["M"], r["tcups"]) for r in rows if r["stage"] == stage)
        axis.plot([p[0] for p in points], [p[1] for p in points], marker=marker, label=f"gpuhmm {stage.upper()}")
    axis.axhline(
        peer_row["gcups"] / 1000,
        color="grey",
        linestyle="--",
        label=f"pyhmmer.hmmsearch, {peer_row['threads']} threads",
    )
    axis.set_xscale("log")
    axis.set_xlabel("model length M")
    axis.set_ylabel("TCUPS")
    axis.set_title(f"SSV/MSV filter throughput, {gpu}")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", required=True)
    parser.add_argument("--proteome", required=True)
    parser.add_argument("--residues", type=float, default=100e6)
    parser.add_argument("--batch", type=int, default=16, help="copies of a model per launch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--random-sequences", type=int, default=120)
    parser.add_argument("--peer-residues", type=float, default=20e6)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--skip-exact", action="store_true")
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args(argv)

    engine = GpuEngine()
    alphabet = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.plan7.HMMFile(args.models) as handle:
        hmms = list(handle)
    print(f"{engine.name}: sm_{engine.architecture}, {engine.multiprocessors} SMs; {len(hmms)} models", flush=True)

    exact = None
    if not args.skip_exact:
        proteome = read_digital(args.proteome, alphabet)
        exact_proteome = check_exact(engine, hmms, proteome, args.threads, "proteome")
        exact_random = check_exact(
            engine, hmms, random_sequences(alphabet, args.random_sequences, 7), args.threads, "random"
        )
        exact = {
            key: exact_proteome[key] + exact_random[key]
            for key in ("pairs", "identical", "pass_sets_identical", "overflows", "ssv_undecided")
        }
        exact["models"] = len(hmms)
        exact["mismatches"] = exact_proteome["mismatches"] + exact_random["mismatches"]

    started = time.perf_counter()
    residues, offsets, _ = make_database(int(args.residues), args.proteome, args.models)
    lengths = np.diff(offsets)
    shard = filters.FilterShard.build(residues, offsets, alphabet)
    print(
        f"database: {len(lengths)} sequences, {int(lengths.sum())} residues "
        f"({time.perf_counter() - started:.1f} s to build)",
        flush=True,
    )
    chosen = pick_models(hmms, LENGTHS)
    rows = throughput(engine, chosen, shard, args.batch, args.repeats)

    take = np.searchsorted(offsets, args.peer_residues)
    digital = [
        pyhmmer.easel.DigitalSequence(alphabet, name=f"s{i}".encode(), sequence=residues[offsets[i] : offsets[i + 1]])
        for i in range(int(take))
    ]
    peer_row = peer([h for h in chosen if not h.name.startswith("sampled")], digital, args.threads)
    print(f"[peer] {peer_row}", flush=True)

    def median(stage, low, high):
        values = [r["tcups"] for r in rows if r["stage"] == stage and low <= r["M"] <= high]
        return round(float(np.median(values)), 3) if values else None

    summary = {
        "msv_median_tcups_M100_2400": median("msv", 100, 2400),
        "ssv_median_tcups_M100_2400": median("ssv", 100, 2400),
        "msv_tcups_M50": median("msv", 40, 60),
    }
    gpu_tag = engine.name.replace("NVIDIA ", "").split()[0].lower()
    record = {
        "gpu": engine.name,
        "date": datetime.date.today().isoformat(),
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "db_residues": int(lengths.sum()),
        "db_sequences": int(len(lengths)),
        "results": rows,
        "summary": summary,
        "exact": exact,
        "peer": peer_row,
        "compute_capability": engine.architecture,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"kernels-{gpu_tag}.json").write_text(json.dumps(record, indent=2) + "\n")
    plot(rows, peer_row, out / f"kernels-{gpu_tag}.png", engine.name)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
