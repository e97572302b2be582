#!/usr/bin/env python3
"""Where the GPU starts to pay: `gpuhmm search` on the CPU and on the GPU over a ladder of job sizes.

Run on the GPU machine, from the repository root:

    python3 benchmarks/auto_cutoff.py --models benchmarks/data/pfam-subset-2766.h3m.xz \
        --proteome benchmarks/data/proteome-HG003687.faa

Each rung of the ladder is the first K models of the model file against C copies of the
proteome (each copy's names tagged, so that every name is its own). Every rung runs
`python3 -m gpuhmm search --backend cpu --cpu N` and `--backend gpu --cpu N` as subprocesses,
from files to the three tables, `--repeats` times each, alternating which goes first; every
run's tables must equal the first CPU run's. A warm-up GPU search of every model first puts
the kernels in the disk cache (NVRTC's compilation is never timed). The record gives, per
rung, the cells (Σ M × residues), the cells `--backend auto` estimates before reading the
database (`auto_cells`: the FASTA file's bytes for its residues), the wall times, and the
GPU runs' `first_kernel_s`; then the suggested `AUTO_GPU_MIN_CELLS_PER_THREAD`: the geometric
mean of the largest rung the CPU wins and the smallest from which the GPU wins every larger
one, in `auto_cells`, per thread. `--quick` runs a short ladder, on the CPU only where no GPU is
usable, to check the script. Writes benchmarks/results/auto-cutoff-<gpu or host>.json. Timing
belongs here, never in tests.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpuhmm import options  # noqa: E402
from gpuhmm.engine import gpu_problem  # noqa: E402
from gpuhmm.placement import input_bytes  # noqa: E402

from cpu_vs_pyhmmer import compare_tables  # noqa: E402
from endtoend import (  # noqa: E402
    default_threads,
    gpu_name,
    gpu_tag,
    gpuhmm_search,
    host_tag,
    open_models,
    read_summary,
    recorded,
    run_timed,
    table_flags,
    table_paths,
)

DATA = HERE / "data"
#: (models, proteome copies) per rung, smallest first.
LADDER = ((1, 1), (5, 1), (25, 1), (100, 1), (300, 1), (1000, 1), (2766, 1), (2766, 2), (2766, 4))
QUICK_LADDER = ((1, 1), (5, 1), (25, 1))


def log(message):
    print(f"[auto_cutoff {time.strftime('%H:%M:%S')}] {message}", flush=True)


def write_models(hmms, path):
    with open(path, "wb") as handle:
        for hmm in hmms:
            hmm.write(handle, binary=True)


def write_copies(proteome, copies, path):
    """`copies` copies of the proteome, the names of copy c > 0 tagged `cC_`."""
    text = proteome.read_bytes().rstrip(b"\n") + b"\n"
    with open(path, "wb") as handle:
        for copy in range(copies):
            handle.write(text if copy == 0 else (b"\n" + text).replace(b"\n>", f"\n>c{copy}_".encode())[1:])


def proteome_residues(proteome):
    from pyhmmer.easel import Alphabet, SequenceFile

    with SequenceFile(str(proteome), digital=True, alphabet=Alphabet.amino()) as handle:
        return sum(len(sequence) for sequence in handle.read_block())


def crossover(rungs):
    """(the largest rung the CPU wins, the smallest from which the GPU wins every larger one), as
    indices or None, and the suggested cut-off in `auto_cells` between them (None where the
    ladder does not bracket it)."""
    wins = [statistics.median(rung["gpu_walls"]) < statistics.median(rung["cpu_walls"]) for rung in rungs]
    first_gpu = next((index for index in range(len(wins)) if all(wins[index:])), None)
    last_cpu = (len(wins) if first_gpu is None else first_gpu) - 1
    if last_cpu < 0:
        return None, first_gpu, None
    if first_gpu is None:
        return last_cpu, None, None
    return last_cpu, first_gpu, math.sqrt(rungs[last_cpu]["auto_cells"] * rungs[first_gpu]["auto_cells"])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=DATA / "pfam-subset-2766.h3m.xz")
    parser.add_argument("--proteome", type=Path, default=DATA / "proteome-HG003687.faa")
    parser.add_argument("--cpu", type=int, default=default_threads(), help="threads of both backends [all]")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a short ladder; the CPU only without a usable GPU")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    ladder = QUICK_LADDER if args.quick else LADDER
    problem = gpu_problem()
    if problem is not None and not args.quick:
        raise SystemExit(f"the GPU backend cannot run here: {problem}")
    backends = ("cpu", "gpu") if problem is None else ("cpu",)
    name, _ = gpu_name() if problem is None else (None, None)
    out = args.out or HERE / "results" / f"auto-cutoff-{gpu_tag(name) or host_tag()}.json"
    with open_models(args.models) as handle:
        hmms = [hmm for _, hmm in zip(range(max(k for k, _ in ladder)), handle)]
    residues = proteome_residues(args.proteome)
    result = {
        "command": None,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "gpu": name,
        "threads": args.cpu,
        "backends": list(backends),
        "gpu_problem": problem,
        "current_cells_per_thread": options.AUTO_GPU_MIN_CELLS_PER_THREAD,
        "rungs": [],
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpuhmm-cutoff-") as scratch:
        work = Path(scratch)
        result["command"] = recorded([sys.executable, str(HERE / "auto_cutoff.py"), *argv], work)
        search = {backend: gpuhmm_search(backend, args.cpu) for backend in backends}
        if "gpu" in backends:
            write_models(hmms, work / "all.h3m")
            tiny = work / "tiny.faa"
            tiny.write_bytes(b"\n>".join(args.proteome.read_bytes().split(b"\n>")[:50]) + b"\n")
            warm_up = [*search["gpu"], *table_flags(table_paths(work / "warm-up")), str(work / "all.h3m"), str(tiny)]
            result["compile_warmup_s"] = round(run_timed(warm_up, work / "warm-up.log"), 3)
            log(f"kernels compiled or loaded in {result['compile_warmup_s']} s")
        for models, copies in ladder:
            label = f"{models}x{copies}"
            models_path, sequences_path = work / f"{models}.h3m", work / f"proteome-{copies}.faa"
            if not models_path.exists():
                write_models(hmms[:models], models_path)
            if not sequences_path.exists():
                write_copies(args.proteome, copies, sequences_path)
            nodes = sum(hmm.M for hmm in hmms[:models])
            rung = {
                "models": models,
                "copies": copies,
                "nodes": nodes,
                "residues": residues * copies,
                "cells": nodes * residues * copies,
                "auto_cells": nodes * input_bytes(sequences_path),
                "commands": {},
                "tables_identical": True,
            }
            walls, tables = {backend: [] for backend in backends}, {}
            for repeat in range(args.repeats):
                for backend in backends if repeat % 2 == 0 else backends[::-1]:
                    directory = work / label / f"{backend}{repeat}"
                    summary = directory / "summary.json"
                    command = [
                        *search[backend],
                        "--summary",
                        str(summary),
                        *table_flags(table_paths(directory)),
                        str(models_path),
                        str(sequences_path),
                    ]
                    rung["commands"].setdefault(backend, recorded(command, work))
                    walls[backend].append(round(run_timed(command, directory / "log.txt"), 3))
                    tables.setdefault(backend, []).append(directory)
                    if backend == "gpu":
                        rung.setdefault("gpu_first_kernel_s", []).append(
                            (read_summary(summary) or {}).get("first_kernel_s")
                        )
            for directory in [*tables["cpu"][1:], *tables.get("gpu", [])]:
                differences = compare_tables(directory, tables["cpu"][0])
                if any(differences.values()):
                    rung["tables_identical"] = False
                    rung.setdefault("differences", []).append(differences)
            rung.update({f"{backend}_walls": walls[backend] for backend in backends})
            result["rungs"].append(rung)
            log(f"{label}: {rung['cells']:.3g} cells, " + ", ".join(f"{b} {walls[b]}" for b in backends))
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(result, indent=1) + "\n")
    result["tables_identical"] = all(rung["tables_identical"] for rung in result["rungs"])
    if "gpu" in backends:
        last_cpu, first_gpu, cutoff = crossover(result["rungs"])
        result["cpu_wins_up_to"] = None if last_cpu is None else result["rungs"][last_cpu]["cells"]
        result["gpu_wins_from"] = None if first_gpu is None else result["rungs"][first_gpu]["cells"]
        result["suggested_cells_per_thread"] = None if cutoff is None else float(f"{cutoff / args.cpu:.2g}")
    result["wall_s"] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {out} ({result['wall_s']} s; tables identical: {result['tables_identical']})")
    if "suggested_cells_per_thread" in result:
        log(f"suggested AUTO_GPU_MIN_CELLS_PER_THREAD: {result['suggested_cells_per_thread']}")
    return 0 if result["tables_identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
