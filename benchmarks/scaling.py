#!/usr/bin/env python3
"""gpuhmm on 1, 2 and 4 GPUs of one node: wall time, parallel efficiency and identical tables.

Run on the multi-GPU machine, from the repository root (hmmemit on PATH):

    python benchmarks/scaling.py --models pfam-subset-2766.h3m.xz --proteome proteome-HG003687.faa

1. The database: `benchdb.make_database` (the proteome, `hmmemit` samples of every model,
   background sequences; all from `--seed`), `--residues` of them, written as FASTA and made
   into a `gpuhmm makedb` directory of `--db-shards` shards, as a user prepares a database
   once and searches it many times (neither step is in the timings).
2. Warm-up: one search of the database's homologs (the proteome and the `hmmemit` samples), so
   that NVRTC has compiled every kernel the searches run into the disk cache. Vit32's kernels
   run only for pairs that Vit16 cannot vouch for, true hits: a warm-up on the proteome alone
   left 16 of them to compile in the first measured run. Then the same search on the largest
   count of GPUs, so that the first timed cluster is not the machine's first.
3. For every count g of `--gpus`: `python -m gpuhmm search --backend gpu --cpu N` on the
   database with CUDA_VISIBLE_DEVICES naming the first g GPUs (one GPU: the in-process
   worker; more: one dask-cuda worker per GPU, N/g threads each), timed from files to the
   three tables. The tables of every g are compared with one GPU's (all but the footer).

efficiency(g) = wall(1) / (g · wall(g)). Writes benchmarks/results/scaling-<gpu>.json and a
PNG next to it, after every count. A database of billions of residues takes longer to search on
one GPU than one device command may run: `--work DIR` keeps the database, tables and logs in
DIR, and a later run with the same DIR and database options reuses the database and keeps the
counts the JSON already holds for it (run the larger counts first, then `--gpus 1`). `--gpus`
without counts only makes the database and warms up.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from benchdb import homolog_count, make_database, write_fasta  # noqa: E402
from cpu_vs_pyhmmer import compare_tables  # noqa: E402
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


def log(message):
    print(f"[scaling {time.strftime('%H:%M:%S')}] {message}", flush=True)


def plot(result, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = [g for g in result["gpus"] if str(g) in result["wall_s"]]
    walls = [result["wall_s"][str(g)] for g in gpus]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar([str(g) for g in gpus], walls, color="tab:blue")
    left.set_xlabel("GPUs")
    left.set_ylabel("seconds, files to tables")
    for x, wall in enumerate(walls):
        left.annotate(f"{wall:.1f} s", (x, wall), ha="center", va="bottom")
    right.plot(gpus, [1.0] + [result["efficiency"].get(str(g)) for g in gpus[1:]], "o-", color="tab:green")
    right.axhline(0.9, color="grey", linestyle="--", linewidth=1)
    right.set_ylim(0, 1.1)
    right.set_xticks(gpus)
    right.set_xlabel("GPUs")
    right.set_ylabel("parallel efficiency, wall(1) / (g · wall(g))")
    figure.suptitle(
        f"{result['models']} models × {result['residues'] / 1e6:.1f} M residues, "
        f"{result['gpu'] or 'no GPU (a smoke test of the CPU backend)'}"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="HMM file (gzip or xz allowed)")
    parser.add_argument("--proteome", type=Path, required=True, help="real proteins for the database")
    parser.add_argument("--first", type=int, help="use the first N models [all]")
    parser.add_argument("--residues", type=float, default=400e6, help="database residues, at least [4e8]")
    parser.add_argument("--db-shards", type=int, default=16, help="database shards [16]")
    parser.add_argument(
        "--gpus", type=int, nargs="*", default=[1, 2, 4], help="GPU counts [1 2 4]; none: only make the database"
    )
    parser.add_argument("--threads", type=int, default=default_threads(), help="host threads in all [every one]")
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument(
        "--backend", choices=("gpu", "cpu"), default="gpu", help="gpuhmm's --backend [gpu]; cpu for a smoke test"
    )
    parser.add_argument("--out", type=Path, help="result JSON [benchmarks/results/scaling-<gpu>.json]")
    parser.add_argument(
        "--work", type=Path, help="keep the database, tables and logs here, and reuse them [a temporary directory]"
    )
    args = parser.parse_args(argv)

    name, driver = gpu_name()
    out = args.out or HERE / "results" / f"scaling-{gpu_tag(name) or 'gpu'}.json"
    work = args.work or Path(tempfile.mkdtemp(prefix="gpuhmm-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    result = {
        "benchmark": "scaling",
        "gpu": name,
        "gpu_driver": driver,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
        "threads": args.threads,
        "gpus": args.gpus,
        "models": None,
        "residues": None,
        "db_shards": args.db_shards,
        "wall_s": {},
        "efficiency": {},
        "tables_identical": None,
        "runs": {},
    }

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")

    models_path = work / "models.h3m"
    database = {
        "models_file": str(args.models),
        "first": args.first,
        "proteome": recorded_path(args.proteome),
        "requested_residues": args.residues,
        "seed": args.seed,
        "db_shards": args.db_shards,
        "warmup": "homologs",
    }
    made = work / "database.json"
    if made.exists() and json.loads(made.read_text())["options"] == database:
        result.update(json.loads(made.read_text())["made"])
        log(f"reusing the database in {work}")
        if out.exists():
            earlier = json.loads(out.read_text())
            if earlier.get("database") == database:
                for key in ("wall_s", "runs"):
                    result[key].update({g: v for g, v in earlier[key].items() if int(g) not in args.gpus})
                result["command"] = f"{earlier['command']} && {result['command']}"
    else:
        with open_models(args.models) as handle, open(models_path, "wb") as written:
            for count, hmm in enumerate(handle):
                if args.first and count >= args.first:
                    break
                hmm.write(written, binary=True)
                result["models"] = count + 1
        started = time.perf_counter()
        residues, offsets, names = make_database(
            int(args.residues), args.proteome, models_path, seed=args.seed, at_least=True, fast=True
        )
        write_fasta(work / "db.faa", residues, offsets, names)
        homologs = range(homolog_count(args.proteome, result["models"]))
        write_fasta(work / "warmup.faa", residues, offsets, names, indices=homologs)
        result.update(residues=int(offsets[-1]), sequences=len(names))
        del residues, offsets, names
        run_timed(
            [
                sys.executable,
                "-m",
                "gpuhmm",
                "makedb",
                str(work / "db.faa"),
                str(work / "db"),
                "--shards",
                str(args.db_shards),
            ],
            work / "makedb.log",
            env,
        )
        (work / "db.faa").unlink()
        os.sync()  # the database's gigabytes are on disk before any timed run, not written back during one
        result["database_s"] = round(time.perf_counter() - started, 1)
        made.write_text(
            json.dumps(
                {
                    "options": database,
                    "made": {key: result[key] for key in ("models", "residues", "sequences", "database_s")},
                }
            )
        )
    result["database"] = database
    log(
        f"{result['models']} models; database of {result['residues']} residues in {args.db_shards} shards "
        f"({result['database_s']} s)"
    )

    warm = [
        *gpuhmm_search(args.backend, args.threads),
        "--tblout",
        str(work / "warmup.txt"),
        str(models_path),
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

    for gpus in args.gpus:
        tables = table_paths(work / f"gpus-{gpus}")
        summary_path = work / f"gpus-{gpus}" / "summary.json"
        command = [
            *gpuhmm_search(args.backend, args.threads),
            *table_flags(tables),
            "--summary",
            str(summary_path),
            str(models_path),
            str(work / "db"),
        ]
        visible = ",".join(str(device) for device in range(gpus))
        wall = run_timed(command, work / f"gpus-{gpus}.log", dict(env, CUDA_VISIBLE_DEVICES=visible))
        summary = read_summary(summary_path) or {}
        result["wall_s"][str(gpus)] = round(wall, 3)
        result["runs"][str(gpus)] = {
            "command": f"CUDA_VISIBLE_DEVICES={visible} " + recorded(command, work),
            "cluster": summary.get("cluster"),
            "stages": summary.get("stages"),
            "tasks": summary.get("tasks"),
            "filters": summary.get("filters"),
            "workers": summary.get("workers"),
            "gpu_stages": summary.get("gpu_stages"),
            "log": [
                line
                for line in (work / f"gpus-{gpus}.log").read_text(errors="replace").splitlines()
                if "gpuhmm:" in line and " tasks, " not in line
            ],
        }
        others = sorted(int(g) for g in result["wall_s"] if int(g) != gpus)
        if others:
            differences = compare_tables(tables["tblout"].parent, work / f"gpus-{others[0]}")
            result["runs"][str(gpus)]["table_differences"] = {k: v for k, v in differences.items() if v}
        log(f"{gpus} GPU(s): {wall:.1f} s ({summary.get('cluster')})")
        save()

    result["gpus"] = sorted(int(g) for g in result["wall_s"])
    for key in ("wall_s", "runs"):
        result[key] = {str(g): result[key][str(g)] for g in result["gpus"]}
    one = result["wall_s"].get("1")
    for gpus in sorted(int(g) for g in result["wall_s"]):
        if one and gpus != 1:
            result["efficiency"][str(gpus)] = round(one / (gpus * result["wall_s"][str(gpus)]), 3)
    result["tables_identical"] = all(not run.get("table_differences") for run in result["runs"].values())
    save()
    if not result["gpus"]:
        log(f"database and warm-up done in {work}")
        return
    plot(result, out.with_suffix(".png"))
    log(f"wall {result['wall_s']}, efficiency {result['efficiency']}, tables identical: {result['tables_identical']}")
    log(f"written {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
