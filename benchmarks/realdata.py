"""gpuhmm end to end (files to tables) against pyhmmer.hmmsearch on real proteins, on one host.

Real proteins almost all carry Pfam domains, so most of a search's work is HMMER's domain
definition after the Forward filter; endtoend.py's mostly synthetic database hides that. Here
the database is real proteins only, no two identical.

Run on the GPU machine, from the repository root:

    python benchmarks/realdata.py            # 2766 Pfam models x >= 50M residues
    python benchmarks/realdata.py --quick --backend cpu   # 100 models x ~1M residues, no GPU

In one run, on one host, with N = every host thread:

1. Models: the first `--first` (0: all) of `--models`, written as one binary .h3m that both
   sides read.
2. The database: the proteome `--proteome` once as it is (a sequence identical to an earlier
   one is left out), then mutated copies of it until the total reaches `--residues`. In each
   copy every protein has round(`--mutation-rate` x its positions that are not '*') positions
   substituted (the rate at least 0.10), chosen uniformly without replacement within the
   protein; each replacement is drawn from the 20 standard amino acids with HMMER's null-model
   frequencies (benchdb.background_residues), redrawn while it equals the residue it replaces.
   Lengths, headers' descriptions and every '*' are kept; copy k
   renames sequence S to S.m<k>. Everything follows from `--seed` (numpy PCG64). Every
   sequence is hashed to check that no two are identical (`distinct_sequences`). Written as
   FASTA with benchdb.write_fasta.
3. Warm-up: `gpuhmm search` on a random `--warmup-fraction` of the sequences and, on the GPU,
   a preload of every kernel the models use, so NVRTC's kernels are compiled and cached before
   the timed run (`compile_warmup_s`).
4. `python -m gpuhmm search --backend B --cpu N --tblout --domtblout --pfamtblout --summary`
   on the whole database as a subprocess, timed from files to tables (`wall_s`, the median of
   `--repeats` runs). Its summary gives `pairs_past_forward` (filters.n_past_fwd),
   `cpu_tail_cpu_s` (gpu_stages.cpu_tail_cpu_s: CPU seconds of pyhmmer's domain stages),
   `pairs_finished_on_gpu`, and `tail` (`tail_figures`: the tail queue's wall inside the
   search, the pairs the GPU and the host finished, their rate, and nvidia-smi's GPU
   utilization over that wall). Then the same search with `--F3 1e-300`, which lets nothing
   past the Forward filter: the filter path and the fixed costs alone (`filter_path_wall_s`);
   and on the GPU, with `--domaindef cpu`: pyhmmer finishing every pair (`domaindef_cpu_wall_s`).
5. The peer: `pyhmmer.hmmsearch(hmms, block, cpus=N)` in this process on the models and the
   digital sequence block read beforehand (reading timed apart), fully consumed; its tables
   are written afterwards (untimed) and compared with gpuhmm's, every line but gpuhmm's
   trailing footer (`tables_identical`).

Writes benchmarks/results/realdata-<gpu>.json (realdata-cpu-<host>.json without a GPU,
-quick before .json for --quick; or --out) after every step, so a failing step still leaves a
record with its error:

    {"benchmark": "realdata", "gpu", "date", "command", "backend", "quick", "host": {...},
     "host_threads", "models", "models_file", "model_nodes", "sequences", "distinct_sequences",
     "residues", "cells", "database": {"source", "proteome", "proteome_sequences",
     "proteome_residues", "proteome_duplicates_left_out", "copies", "mutation_rate",
     "substitutions_per_copy", "seed", "rng", ...}, "compile_warmup_s", "warmup": {...},
     "wall_s", "gpuhmm": {"command", "runs_s", "filters", "gpu_stages", "totals", ...},
     "filter_path_wall_s", "filter_path": {"command", "stages"}, "domaindef_cpu_wall_s",
     "domaindef_cpu": {"command", "stages"}, "tail": {"wall_s", "pairs_finished_on_gpu",
     "pairs_to_pyhmmer", "pairs_per_s", "gpu_busy_percent"},
     "peer_threads", "peer_wall_s", "peer": {...}, "speedup_vs_pyhmmer", "tables_identical",
     "table_lines", "pairs_past_forward", "pairs_finished_on_gpu", "cpu_tail_cpu_s",
     "stages": {name: seconds}, "errors": {step: message}, "png"}

and next to it a PNG of gpuhmm's stages (endtoend.plot). Timing belongs here, never in tests.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import itertools
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

# the helpers this benchmark shares with the others, next to this file
sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdb import write_fasta  # noqa: E402
from cpu_vs_pyhmmer import compare_tables
from endtoend import (
    DATA,
    RunPlace,
    Steps,
    add_run_arguments,
    gpuhmm_search,
    open_models,
    plot,
    recorded,
    recorded_path,
    run_timed,
    stage_seconds,
    table_flags,
    table_paths,
    timed_gpuhmm,
    timed_peer,
)
from mutated import Proteome  # noqa: E402

DEFAULT_MODELS = DATA / "pfam-subset-2766.h3m.gz"
DEFAULT_PROTEOME = DATA / "proteome-HG003687.faa"
QUICK = {"first": 100, "residues": 1_000_000}
FULL = {"first": 0, "residues": 50_000_000}
MIN_MUTATION_RATE = 0.10

# Load (or compile) every kernel the models' lengths use, as endtoend.py's warm-up does.
PRELOAD = """\
import sys
import pyhmmer
from gpuhmm.engine.gpu import GpuEngine
GpuEngine().preload([h.M for h in pyhmmer.plan7.HMMFile(sys.argv[1])])
"""


def log(message):
    print(f"[realdata {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def sequence_digests(residues, offsets):
    """A 128-bit BLAKE2b digest of every sequence's residue codes."""
    view = memoryview(residues)
    bounds = offsets.tolist()
    return [hashlib.blake2b(view[start:stop], digest_size=16).digest() for start, stop in itertools.pairwise(bounds)]


def mutated_database(proteome_path, target_residues, rate, seed):
    """(residues uint8, offsets int64, headers, info): the proteome's distinct sequences, then
    mutated copies of them until at least `target_residues` residues (`mutated.Proteome`), every
    copy drawn from one generator."""
    proteome = Proteome(proteome_path)
    size, copies = len(proteome.base), proteome.copies_for(target_residues)
    per_protein = proteome.substitutions(rate)
    rng = np.random.Generator(np.random.PCG64(seed))
    residues = np.empty(size * (copies + 1), dtype=np.uint8)
    residues[:size] = proteome.base
    for copy in range(1, copies + 1):
        proteome.copy(per_protein, rng, residues[copy * size : (copy + 1) * size])
    offsets = np.concatenate([[0], np.cumsum(np.tile(proteome.lengths, copies + 1))]).astype(np.int64)
    headers = [header for copy in range(copies + 1) for header in proteome.headers(copy, copies)]
    info = {
        "source": (
            f"the proteome once as it is, then {copies} mutated copies of it: in each copy every protein has "
            f"round({rate:g} x its positions that are not '*') positions (uniform without replacement) "
            "substituted with residues drawn from HMMER's null-model frequencies over the 20 standard amino "
            "acids, redrawn while equal to the residue replaced; lengths, descriptions and '*' kept; copy k "
            "renames S to S.m<k>"
        ),
        "proteome": recorded_path(proteome_path),
        "proteome_sequences": len(proteome.lengths),
        "proteome_residues": size,
        "proteome_duplicates_left_out": proteome.left_out,
        "copies": copies,
        "mutation_rate": rate,
        "mutable_positions_per_copy": len(proteome.mutable),
        "substitutions_per_copy": int(per_protein.sum()),
        "seed": seed,
        "rng": "numpy.random.Generator(PCG64(seed))",
        "requested_residues": int(target_residues),
    }
    return residues, offsets, headers, info


def table_rows(path):
    """Lines of a table that are not comments."""
    with open(path) as handle:
        return sum(1 for line in handle if not line.startswith("#"))


def summary_field(summary, name):
    """`name` at the top of gpuhmm's summary, or in its filters or gpu_stages; None if absent."""
    for section in (summary, summary.get("filters") or {}, summary.get("gpu_stages") or {}):
        if name in section:
            return section[name]
    return None


def tail_figures(summary, utilization):
    """The tail inside the search (`--domaindef gpu`): its wall from the first pairs queued to the
    last finished, the pairs each side finished and their rate, and the GPU's mean utilization
    (nvidia-smi's samples) over that wall; None without the summary's tail window."""
    window = summary.get("tail")
    if not window:
        return None
    started, ended = window["started_at"], window["ended_at"]
    pairs = {side: summary_field(summary, side) or 0 for side in ("pairs_finished_on_gpu", "pairs_to_pyhmmer")}
    figures = {"wall_s": round(ended - started, 3), **pairs}
    figures["pairs_per_s"] = round(sum(pairs.values()) / max(ended - started, 1e-9), 1)
    if utilization and utilization.get("samples"):
        samples = np.asarray(utilization["samples"], dtype=np.float64)
        moments = utilization["started_at"] + utilization["samples_every_s"] * np.arange(len(samples))
        inside = samples[(moments >= started) & (moments <= ended)]
        figures["gpu_busy_percent"] = round(float(inside.mean()), 1) if len(inside) else None
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser, "realdata", FULL, QUICK)
    parser.add_argument(
        "--mutation-rate",
        type=float,
        default=0.15,
        help=f"share of each copy's positions substituted, >= {MIN_MUTATION_RATE} [0.15]",
    )
    parser.add_argument("--seed", type=int, default=20261121, help="mutation and warm-up sample seed [20261121]")
    parser.add_argument(
        "--warmup-fraction", type=float, default=0.01, help="share of the sequences the warm-up searches [0.01]"
    )
    parser.add_argument("--repeats", type=int, default=1, help="gpuhmm runs; the median is wall_s [1]")
    args = parser.parse_args(argv)
    if not MIN_MUTATION_RATE <= args.mutation_rate <= 1:
        parser.error(f"--mutation-rate must be in [{MIN_MUTATION_RATE}, 1]")
    if args.threads < 1 or args.repeats < 1 or not 0 < args.warmup_fraction <= 1:
        parser.error("--threads and --repeats must be >= 1, --warmup-fraction in (0, 1]")

    preset = QUICK if args.quick else FULL
    first = preset["first"] if args.first is None else args.first
    target_residues = int(preset["residues"] if args.residues is None else args.residues)
    threads = args.threads
    place = RunPlace.of(args, "realdata")
    name, out, png, work, env = place.gpu, place.out, place.png, place.work, place.env
    result = {
        "benchmark": "realdata",
        "gpu": name,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
        "backend": args.backend,
        "quick": args.quick,
        "host": place.host(),
        "host_threads": threads,
        "models": None,
        "models_file": str(args.models),
        "model_nodes": None,
        "sequences": None,
        "distinct_sequences": None,
        "residues": None,
        "cells": None,
        "database": None,
        "compile_warmup_s": None,
        "wall_s": None,
        "filter_path_wall_s": None,
        "domaindef_cpu_wall_s": None,
        "tail": None,
        "peer_threads": threads,
        "peer_wall_s": None,
        "speedup_vs_pyhmmer": None,
        "tables_identical": None,
        "pairs_past_forward": None,
        "pairs_finished_on_gpu": None,
        "cpu_tail_cpu_s": None,
        "stages": None,
        "errors": {},
    }

    step = Steps(result, out, log)
    save = step.save

    state = {}
    gpuhmm_base = gpuhmm_search(args.backend, threads) + shlex.split(args.gpuhmm_args)
    try:
        # 1. models, as one uncompressed binary file that both sides read
        def load_models():
            hmms = []
            with open_models(args.models) as handle:
                for hmm in handle:
                    if first and len(hmms) >= first:
                        break
                    hmms.append(hmm)
            path = work / "models.h3m"
            with open(path, "wb") as handle:
                for hmm in hmms:
                    hmm.write(handle, binary=True)
            state["models_path"] = path
            result.update(models=len(hmms), model_nodes=sum(h.M for h in hmms))
            log(f"{len(hmms)} models, {result['model_nodes']} nodes")
            return hmms

        if not step("models", load_models):
            raise SystemExit("no models")

        # 2. the database (proteome + mutated copies) and the warm-up sample, as FASTA
        def database():
            started = time.perf_counter()
            residues, offsets, headers, info = mutated_database(
                args.proteome, target_residues, args.mutation_rate, args.seed
            )
            generated = time.perf_counter() - started
            started = time.perf_counter()
            distinct = len(set(sequence_digests(residues, offsets)))
            hashed = time.perf_counter() - started
            started = time.perf_counter()
            path = work / "db.faa"
            write_fasta(path, residues, offsets, headers)
            written = time.perf_counter() - started
            state["db_path"] = path
            total = int(offsets[-1])
            result.update(
                sequences=len(headers), distinct_sequences=distinct, residues=total, cells=result["model_nodes"] * total
            )
            result["database"] = {
                **info,
                "generate_s": round(generated, 3),
                "hash_s": round(hashed, 3),
                "write_fasta_s": round(written, 3),
                "fasta_bytes": path.stat().st_size,
                "path": str(path) if args.keep else None,
            }
            log(
                f"database: {len(headers)} sequences ({distinct} distinct), {total} residues, "
                f"{info['copies']} mutated copies (generated in {generated:.1f} s, hashed in {hashed:.1f} s, "
                f"FASTA written in {written:.1f} s)"
            )
            if distinct != len(headers):
                raise RuntimeError(f"{len(headers) - distinct} sequences repeat an earlier one")
            rng = np.random.Generator(np.random.PCG64(args.seed + 1))
            chosen = np.flatnonzero(rng.random(len(headers)) < args.warmup_fraction)
            if len(chosen) == 0:
                chosen = np.array([int(rng.integers(len(headers)))])
            sample = work / "warmup.faa"
            count, sample_residues = write_fasta(sample, residues, offsets, headers, chosen)
            state["warmup_path"] = sample
            result["warmup"] = {"fraction": args.warmup_fraction, "sequences": count, "residues": sample_residues}

        step("database", database)
        if "db_path" not in state:
            raise SystemExit("no database")

        # 3. warm-up: kernels compiled (NVRTC) into the disk cache before the timed run
        def warmup():
            paths = table_paths(work / "warmup")
            command = [*gpuhmm_base, *table_flags(paths), str(state["models_path"]), str(state["warmup_path"])]
            search = run_timed(command, work / "warmup.log", env)
            preload = 0.0
            if args.backend != "cpu":
                preload = run_timed(
                    [sys.executable, "-c", PRELOAD, str(state["models_path"])], work / "preload.log", env
                )
            result["compile_warmup_s"] = round(search + preload, 3)
            result["warmup"].update(search_s=round(search, 3), preload_s=round(preload, 3))
            log(f"warm-up: search {search:.1f} s, preload {preload:.1f} s")

        step("warmup", warmup)

        # 4. gpuhmm end to end on the whole database
        def gpuhmm_run(directory):
            return directory, *timed_gpuhmm(gpuhmm_base, directory, state["models_path"], state["db_path"], env)

        def gpuhmm_full():
            runs = []
            for repeat in range(args.repeats):
                runs.append(gpuhmm_run(work / ("gpuhmm" if repeat == 0 else f"gpuhmm-{repeat + 1}")))
                log(f"gpuhmm run {repeat + 1}/{args.repeats}: {runs[-1][2]:.1f} s")
            # the median run stands for the whole: identical searches vary by seconds on one host
            directory, command, wall, summary, utilization = sorted(runs, key=lambda run: run[2])[len(runs) // 2]
            state["gpuhmm_tables"] = directory
            state["gpuhmm_repeats_agree"] = all(
                not any(compare_tables(directory, run[0]).values()) for run in runs if run[0] != directory
            )
            stages = {stage: round(seconds, 3) for stage, seconds in stage_seconds(summary)}
            gpu_stages = summary.get("gpu_stages") or {}
            finished = summary_field(summary, "pairs_finished_on_gpu")
            result.update(
                wall_s=round(wall, 3),
                stages=stages,
                pairs_past_forward=(summary.get("filters") or {}).get("n_past_fwd"),
                # pyhmmer finishes every pair past Forward until gpuhmm's summary counts otherwise
                pairs_finished_on_gpu=0 if finished is None else finished,
                cpu_tail_cpu_s=summary_field(summary, "cpu_tail_cpu_s"),
                first_kernel_s=summary.get("first_kernel_s"),
                tail=tail_figures(summary, utilization),
            )
            result["gpuhmm"] = {
                "command": recorded(command, work),
                "runs_s": [round(run[2], 3) for run in runs],
                "median_s": round(statistics.median(run[2] for run in runs), 3),
                "gcups": round(result["cells"] / wall / 1e9, 2),
                "filters": summary.get("filters"),
                "gpu_stages": gpu_stages or None,
                "totals": summary.get("totals"),
                "tasks": summary.get("tasks"),
                "task_seconds": summary.get("task_seconds"),
                "cluster": summary.get("cluster"),
                "Z": summary.get("Z"),
                "gpu_utilization": utilization,
            }
            log(
                f"gpuhmm: {wall:.1f} s; past Forward {result['pairs_past_forward']}, "
                f"CPU tail {result['cpu_tail_cpu_s']} CPU s; stages {stages}"
            )

        step("gpuhmm", gpuhmm_full)

        def variant(name, options):
            """The same search with `options`: its wall and record under `name`, and its summary."""
            command, wall, summary, _ = timed_gpuhmm(
                [*gpuhmm_base, *options], work / name, state["models_path"], state["db_path"], env
            )
            result[f"{name.replace('-', '_')}_wall_s"] = round(wall, 3)
            result[name.replace("-", "_")] = {
                "command": recorded(command, work),
                "stages": {stage: round(seconds, 3) for stage, seconds in stage_seconds(summary)},
            }
            log(f"{shlex.join(options)}: {wall:.1f} s")
            return summary

        # 4b. the filter path alone: the same search with nothing past Forward (no tail)
        def filter_path():
            summary = variant("filter-path", ["--F3", "1e-300"])
            result["filter_path"]["first_kernel_s"] = summary.get("first_kernel_s")

        step("filter_path", filter_path)

        # 4c. pyhmmer finishing every pair past Forward (--domaindef cpu), the GPU backend's other tail
        if args.backend != "cpu":
            step("domaindef_cpu", lambda: variant("domaindef-cpu", ["--domaindef", "cpu"]))

        # 5. the peer: pyhmmer.hmmsearch in this process, models and sequences read beforehand
        def peer():
            paths = table_paths(work / "peer")
            result["peer"] = timed_peer(state["models_path"], state["db_path"], threads, work / "peer", log)
            wall, written = result["peer"]["wall_s"], result["peer"]["write_tables_s"]
            result["peer"]["gcups"] = round(result["cells"] / wall / 1e9, 2)
            result["peer_wall_s"] = wall
            log(f"peer: {wall:.1f} s, tables written in {written:.1f} s")
            if result.get("wall_s"):
                result["speedup_vs_pyhmmer"] = round(wall / result["wall_s"], 3)
            if state.get("gpuhmm_tables"):
                differences = compare_tables(state["gpuhmm_tables"], work / "peer")
                result["tables_identical"] = (
                    all(d is None for d in differences.values()) and state["gpuhmm_repeats_agree"]
                )
                result["table_lines"] = {flag: table_rows(path) for flag, path in paths.items()}
                if not result["tables_identical"]:
                    result["table_differences"] = {f: d for f, d in differences.items() if d is not None}
                log(f"tables identical to the peer's: {result['tables_identical']} (rows: {result['table_lines']})")

        step("peer", peer)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    try:
        # endtoend.plot draws result["gpuhmm"]["stages_s"]; give it this run's stages there
        plot({**result, "gpuhmm": {"stages_s": result["stages"] or {}}}, png)
        result["png"] = str(png)
    except Exception as error:  # noqa: BLE001 (a missing matplotlib must not lose the JSON)
        result["errors"]["plot"] = f"{type(error).__name__}: {error}"
    save()
    log(
        f"gpuhmm {result['wall_s']} s, pyhmmer {result['peer_wall_s']} s ({threads} threads): "
        f"speed-up {result['speedup_vs_pyhmmer']}; tables identical: {result['tables_identical']}; "
        f"errors: {list(result['errors']) or 'none'}"
    )
    log(f"written {out} and {png}")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
