#!/usr/bin/env python3
"""gpuhmm on 1, 2 and 4 GPUs of one node: wall time, parallel efficiency and identical tables,
cold and against a warm `gpuhmm cluster`.

Run on the multi-GPU machine, from the repository root (hmmemit on PATH):

    python benchmarks/scaling.py --models pfam-subset-2766.h3m.xz --proteome proteome-HG003687.faa
    python benchmarks/scaling.py --database real --residues 2e8 --modes cold warm ...

1. The database, `--residues` of it, written as FASTA and made into a `gpuhmm makedb`
   directory of `--db-shards` shards, as a user prepares a database once and searches it many
   times (neither step is in the timings):
   - `synthetic` (default): `benchdb.make_database` (the proteome, `hmmemit` samples of every
     model, background sequences; all from `--seed`);
   - `real`: realdata.py's, the proteome and mutated copies of it (`--mutation-rate`), real
     proteins only, so that most of the work is HMMER's domain stages after Forward.
2. Warm-up: one search of the database's homologs (synthetic: the proteome and the `hmmemit`
   samples; real: the proteome), so that NVRTC has compiled every kernel the searches run into
   the disk cache. Vit32's kernels run only for pairs that Vit16 cannot vouch for, true hits: a
   warm-up on the proteome alone left 16 of them to compile in the first measured run. Then the
   same search on the largest count of GPUs, so that the first timed cluster is not the
   machine's first.
3. For every count g of `--gpus`: `python -m gpuhmm search --backend gpu --cpu N` on the
   database with CUDA_VISIBLE_DEVICES naming the first g GPUs (one GPU: the in-process
   worker; more: one dask-cuda worker per GPU, N/g threads each), timed from files to the
   three tables (cold).
4. With `--modes warm` (or `cold warm`), for every g: `gpuhmm cluster --cpu N` on the first g
   GPUs (one worker per GPU), the warm-up search against it untimed, then the same search as
   in 3 with `--scheduler`, timed (warm: workers, CUDA contexts and kernels ready; the
   database's shards are loaded by the timed search itself).

Each run records a SHA-256 digest of each of its tables (all but the footer); the tables of
every run must equal one GPU's cold run's. efficiency(g) = wall(1) / (g · wall(g)), cold and
warm apart. Each run also records its workers' tasks, busy seconds and last task's end, which
show how evenly the work was spread. Writes benchmarks/results/scaling-<database>-<gpu>.json
(or `--out`) and a PNG next to it, after every run. The database follows from its options
alone, so a measurement too long for one sitting can be split: a later run whose database
options equal those of the JSON at `--out` keeps the runs it holds for other counts and modes.
`--work DIR` keeps the database, tables and logs in DIR and reuses the database where its
options are the same. `--gpus` without counts only makes the database and warms up.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from benchdb import homolog_count, make_database, write_fasta  # noqa: E402
from cpu_vs_pyhmmer import TABLES, strip_footer  # noqa: E402
from endtoend import (  # noqa: E402
    default_threads,
    gpu_name,
    gpu_tag,
    gpuhmm_search,
    open_models,
    read_summary,
    recorded,
    recorded_path,
    run_timed,
    table_flags,
    table_paths,
)
from realdata import mutated_database  # noqa: E402

#: The two ways a count of GPUs is timed: its own processes, or a running `gpuhmm cluster`.
MODES = {"cold": ("wall_s", "efficiency", "runs"), "warm": ("warm_wall_s", "warm_efficiency", "warm_runs")}


def log(message):
    print(f"[scaling {time.strftime('%H:%M:%S')}] {message}", flush=True)


def plot(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.4
    for offset, (mode, (wall_key, efficiency_key, _)) in zip((-width / 2, width / 2), MODES.items()):
        gpus = [g for g in result["gpus"] if str(g) in result[wall_key]]
        if not gpus:
            continue
        walls = [result[wall_key][str(g)] for g in gpus]
        places = [result["gpus"].index(g) + offset for g in gpus]
        left.bar(places, walls, width, label=mode)
        for x, wall in zip(places, walls):
            left.annotate(f"{wall:.1f} s", (x, wall), ha="center", va="bottom", fontsize=8)
        efficiency = [result[efficiency_key].get(str(g), 1.0 if g == 1 else None) for g in gpus]
        right.plot(gpus, efficiency, "o-", label=mode)
    left.set_xticks(range(len(result["gpus"])), [str(g) for g in result["gpus"]])
    left.set_xlabel("GPUs")
    left.set_ylabel("seconds, files to tables")
    left.legend()
    right.axhline(0.9, color="grey", linestyle="--", linewidth=1)
    right.set_ylim(0, 1.1)
    right.set_xticks(result["gpus"])
    right.set_xlabel("GPUs")
    right.set_ylabel("parallel efficiency, wall(1) / (g · wall(g))")
    right.legend()
    figure.suptitle(
        f"{result['models']} models × {result['residues'] / 1e6:.1f} M residues ({result['database']['kind']}), "
        f"{result['gpu'] or 'no GPU (a smoke test of the CPU backend)'}"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def make_inputs(args, work, env, result):
    """Write the models and the warm-up FASTA and make the database directory in `work`,
    recording their sizes in `result`."""
    with open_models(args.models) as handle, open(work / "models.h3m", "wb") as written:
        for count, hmm in enumerate(handle):
            if args.first and count >= args.first:
                break
            hmm.write(written, binary=True)
            result["models"] = count + 1
    started = time.perf_counter()
    if args.database == "real":
        residues, offsets, names, _ = mutated_database(args.proteome, args.residues, args.mutation_rate, args.seed)
        homologs = range(homolog_count(args.proteome, 0))
    else:
        residues, offsets, names = make_database(
            int(args.residues), args.proteome, work / "models.h3m", seed=args.seed, at_least=True, fast=True
        )
        homologs = range(homolog_count(args.proteome, result["models"]))
    write_fasta(work / "db.faa", residues, offsets, names)
    write_fasta(work / "warmup.faa", residues, offsets, names, indices=homologs)
    result.update(residues=int(offsets[-1]), sequences=len(names))
    del residues, offsets, names
    makedb = [sys.executable, "-m", "gpuhmm", "makedb", str(work / "db.faa"), str(work / "db")]
    run_timed([*makedb, "--shards", str(args.db_shards)], work / "makedb.log", env)
    (work / "db.faa").unlink()
    os.sync()  # the database's gigabytes are on disk before any timed run, not written back during one
    result["database_s"] = round(time.perf_counter() - started, 1)


@contextlib.contextmanager
def warm_cluster(args, work, env, gpus):
    """`gpuhmm cluster` on `env`'s GPUs, with the warm-up search run against it; yields the
    `--scheduler` option that reaches it and the seconds it took to be ready."""
    scheduler_file = work / f"scheduler-{gpus}.json"
    scheduler_file.unlink(missing_ok=True)
    command = [sys.executable, "-m", "gpuhmm", "cluster", "--backend", args.backend, "--cpu", str(args.threads)]
    started = time.perf_counter()
    with open(work / f"cluster-{gpus}.log", "wb") as cluster_log:
        cluster = subprocess.Popen(
            [*command, "--scheduler-file", str(scheduler_file)], stdout=cluster_log, stderr=subprocess.STDOUT, env=env
        )
    try:
        while not scheduler_file.exists():
            if cluster.poll() is not None:
                raise RuntimeError(f"gpuhmm cluster stopped before it was ready (see {work}/cluster-{gpus}.log)")
            time.sleep(0.05)
        ready = time.perf_counter() - started
        scheduler = ["--scheduler", str(scheduler_file)]
        warmup = [*gpuhmm_search(args.backend, args.threads), *scheduler, "--tblout", str(work / "warmup-warm.txt")]
        run_timed([*warmup, str(work / "models.h3m"), str(work / "warmup.faa")], work / f"warmup-warm-{gpus}.log", env)
        yield scheduler, ready
    finally:
        cluster.send_signal(signal.SIGTERM)
        cluster.wait(120)


def timed_search(args, work, env, label, extra=()):
    """Time one search of the database into work/label; returns (wall seconds, its record)."""
    tables = table_paths(work / label)
    summary_path = work / label / "summary.json"
    command = [
        *gpuhmm_search(args.backend, args.threads),
        *extra,
        *table_flags(tables),
        "--summary",
        str(summary_path),
        str(work / "models.h3m"),
        str(work / "db"),
    ]
    wall = run_timed(command, work / f"{label}.log", env)
    summary = read_summary(summary_path) or {}
    workers = summary.get("workers") or {}
    ends = [worker["last_end_s"] for worker in workers.values()]
    return wall, {
        "command": f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} " + recorded(command, work),
        "cluster": (summary.get("cluster") or "").replace(str(work), "$WORK"),
        "stages": summary.get("stages"),
        "tasks": summary.get("tasks"),
        "filters": summary.get("filters"),
        "workers": workers,
        # The span between the first and the last worker to finish: work spread unevenly.
        "worker_end_spread_s": round(max(ends) - min(ends), 3) if ends else None,
        "gpu_stages": summary.get("gpu_stages"),
        "log": [
            line.replace(str(work), "$WORK")
            for line in (work / f"{label}.log").read_text(errors="replace").splitlines()
            if "gpuhmm:" in line and " tasks, " not in line
        ],
    }


def table_digests(directory):
    """SHA-256 of each table in `directory`, all but its footer (which names the command)."""
    return {
        flag: hashlib.sha256(strip_footer((directory / f"{flag}.txt").read_text()).encode()).hexdigest()
        for flag in TABLES
    }


def summarize(result):
    """Order the runs by GPU count and derive the efficiencies and the tables' comparison: each
    run's tables against one GPU's cold run's (or the first run's, before that one exists)."""
    result["gpus"] = sorted({int(g) for wall_key, _, _ in MODES.values() for g in result[wall_key]})
    runs = []
    for wall_key, efficiency_key, runs_key in MODES.values():
        for key in (wall_key, runs_key):
            result[key] = {str(g): result[key][str(g)] for g in result["gpus"] if str(g) in result[key]}
        one = result[wall_key].get("1")
        result[efficiency_key] = {
            g: round(one / (int(g) * wall), 3) for g, wall in result[wall_key].items() if one and g != "1"
        }
        runs += result[runs_key].values()
    reference = result["runs"].get("1", runs[0] if runs else {}).get("tables_sha256", {})
    for run in runs:
        run["table_differences"] = [flag for flag, digest in run["tables_sha256"].items() if digest != reference[flag]]
    result["tables_identical"] = all(not run["table_differences"] for run in runs) if runs else None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="HMM file (gzip or xz allowed)")
    parser.add_argument("--proteome", type=Path, required=True, help="real proteins for the database")
    parser.add_argument("--database", choices=("synthetic", "real"), default="synthetic", help="[synthetic]")
    parser.add_argument("--first", type=int, help="use the first N models [all]")
    parser.add_argument("--residues", type=float, default=400e6, help="database residues, at least [4e8]")
    parser.add_argument("--mutation-rate", type=float, default=0.15, help="real: substitutions per residue [0.15]")
    parser.add_argument("--db-shards", type=int, default=16, help="database shards [16]")
    parser.add_argument(
        "--gpus", type=int, nargs="*", default=[1, 2, 4], help="GPU counts [1 2 4]; none: only make the database"
    )
    parser.add_argument(
        "--modes", nargs="+", choices=tuple(MODES), default=["cold"], help="cold, warm (a gpuhmm cluster) [cold]"
    )
    parser.add_argument("--threads", type=int, default=default_threads(), help="host threads in all [every one]")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument(
        "--backend", choices=("gpu", "cpu"), default="gpu", help="gpuhmm's --backend [gpu]; cpu for a smoke test"
    )
    parser.add_argument("--out", type=Path, help="result JSON [benchmarks/results/scaling-<database>-<gpu>.json]")
    parser.add_argument(
        "--work", type=Path, help="keep the database, tables and logs here, and reuse them [a temporary directory]"
    )
    args = parser.parse_args(argv)

    name, driver = gpu_name()
    out = args.out or HERE / "results" / f"scaling-{args.database}-{gpu_tag(name) or 'gpu'}.json"
    work = args.work or Path(tempfile.mkdtemp(prefix="gpuhmm-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    result = {
        "benchmark": "scaling",
        "gpu": name,
        "gpu_driver": driver,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": recorded(getattr(sys, "orig_argv", [sys.executable, *sys.argv]), work),
        "threads": args.threads,
        "gpus": args.gpus,
        "models": None,
        "residues": None,
        "db_shards": args.db_shards,
        **{key: {} for keys in MODES.values() for key in keys},
        "tables_identical": None,
    }

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")

    database = {
        "kind": args.database,
        "models_file": str(args.models),
        "first": args.first,
        "proteome": recorded_path(args.proteome),
        "requested_residues": args.residues,
        "mutation_rate": args.mutation_rate if args.database == "real" else None,
        "seed": args.seed,
        "db_shards": args.db_shards,
        "warmup": "homologs",
    }
    made = work / "database.json"
    if made.exists() and json.loads(made.read_text())["options"] == database:
        result.update(json.loads(made.read_text())["made"])
        log(f"reusing the database in {work}")
    else:
        make_inputs(args, work, env, result)
        made_fields = {key: result[key] for key in ("models", "residues", "sequences", "database_s")}
        made.write_text(json.dumps({"options": database, "made": made_fields}))
    earlier = json.loads(out.read_text()) if out.exists() else {}
    if earlier.get("database") == database:
        for mode, (wall_key, _, runs_key) in MODES.items():
            kept = [g for g in earlier.get(wall_key, {}) if int(g) not in args.gpus or mode not in args.modes]
            for key in (wall_key, runs_key):
                result[key].update({g: earlier[key][g] for g in kept})
        result["command"] = f"{earlier['command']} && {result['command']}"
    result["database"] = database
    log(
        f"{result['models']} models; {args.database} database of {result['residues']} residues "
        f"in {args.db_shards} shards ({result['database_s']} s)"
    )

    warm = [
        *gpuhmm_search(args.backend, args.threads),
        "--tblout",
        str(work / "warmup.txt"),
        str(work / "models.h3m"),
        str(work / "warmup.faa"),
    ]
    result["compile_warmup_s"] = round(run_timed(warm, work / "warmup.log", dict(env, CUDA_VISIBLE_DEVICES="0")), 1)
    log(f"warm-up: {result['compile_warmup_s']} s")
    if max(args.gpus, default=1) > 1:
        # The first dask-cuda cluster of a machine pays once for what later ones do not
        # (Python caching the bytecode of dask-cuda's and Dask's worker modules, say).
        everyone = ",".join(str(device) for device in range(max(args.gpus)))
        seconds = run_timed(warm, work / "warmup-cluster.log", dict(env, CUDA_VISIBLE_DEVICES=everyone))
        log(f"warm-up on GPUs {everyone}: {seconds:.1f} s")

    def record(mode, gpus, wall, run):
        wall_key, _, runs_key = MODES[mode]
        result[wall_key][str(gpus)] = round(wall, 3)
        result[runs_key][str(gpus)] = dict(run, tables_sha256=table_digests(work / f"{mode}-{gpus}"))
        spread = run["worker_end_spread_s"]
        log(f"{gpus} GPU(s), {mode}: {wall:.1f} s ({run['cluster']}; workers' ends spread {spread} s)")
        summarize(result)
        save()

    for gpus in args.gpus:
        visible = dict(env, CUDA_VISIBLE_DEVICES=",".join(str(device) for device in range(gpus)))
        if "cold" in args.modes:
            record("cold", gpus, *timed_search(args, work, visible, f"cold-{gpus}"))
        if "warm" in args.modes:
            with warm_cluster(args, work, visible, gpus) as (scheduler, ready):
                wall, run = timed_search(args, work, visible, f"warm-{gpus}", scheduler)
            record("warm", gpus, wall, dict(run, cluster_ready_s=round(ready, 3)))
    summarize(result)
    save()
    if not result["gpus"]:
        log(f"database and warm-up done in {work}")
        return
    plot(result, out.with_suffix(".png"))
    log(
        f"wall {result['wall_s']}, efficiency {result['efficiency']}; warm wall {result['warm_wall_s']}, "
        f"efficiency {result['warm_efficiency']}; tables identical: {result['tables_identical']}"
    )
    log(f"written {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
