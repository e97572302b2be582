"""The GPU backend's default (the tail queue: the GPU and the host's cores finish the pairs past
Forward) against `--domaindef cpu` (pyhmmer finishes every one), on the searches where the GPU's
tail is weakest: large models, long queries, and small jobs.

Run on the GPU machine, from the repository root:

    python benchmarks/tail_default.py

Workloads, each `gpuhmm search` (or `phmmer`) `--backend gpu --cpu N` from files to the three
tables, after one untimed search (which compiles the kernels for the models' lengths), the two
variants alternating, `--repeats` times each (the median is reported):

- `largest`: the `--largest` longest models of `--models` × the proteome;
- `long_queries`: `gpuhmm phmmer` with the proteome's `--queries` longest proteins as queries
  (models as long as the queries) × the proteome;
- `tests`: `tests/data/pfam-test.h3m.gz` × `tests/data/proteins.faa`, a test-sized job.

Writes benchmarks/results/tail-default-<gpu>.json (or --out):

    {"benchmark": "tail_default", "gpu", "date", "command", "host", "threads", "repeats",
     "workloads": {name: {"command", "warmup_s", "default_s": [...], "domaindef_cpu_s": [...],
                          "default_median_s", "domaindef_cpu_median_s", "ratio",
                          "pairs_finished_on_gpu", "pairs_to_pyhmmer", "tables_identical"}},
     "slowest_ratio", "errors"}

`ratio` is the default's median over `--domaindef cpu`'s: above 1 the default is slower.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_vs_pyhmmer import compare_tables  # noqa: E402
from endtoend import DATA, REPO, RunPlace, Steps, open_models, recorded, timed_gpuhmm  # noqa: E402
from realdata import summary_field  # noqa: E402


def log(message):
    print(f"[tail_default {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def largest_models(path, count, out):
    with open_models(path) as handle:
        hmms = sorted(handle, key=lambda hmm: -hmm.M)[:count]
    with open(out, "wb") as handle:
        for hmm in hmms:
            hmm.write(handle, binary=True)
    return f"the {count} largest models of {path.name} (M {hmms[-1].M}..{hmms[0].M})"


def longest_proteins(path, count, out):
    records, name = {}, None
    for line in Path(path).read_text().splitlines():
        if line.startswith(">"):
            name = line
            records[name] = []
        elif name is not None:
            records[name].append(line)
    chosen = sorted(records, key=lambda header: -sum(len(line) for line in records[header]))[:count]
    Path(out).write_text("".join(header + "\n" + "\n".join(records[header]) + "\n" for header in chosen))
    lengths = sorted(sum(len(line) for line in records[header]) for header in chosen)
    return f"the {count} longest proteins of {Path(path).name} (L {lengths[0]}..{lengths[-1]})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=DATA / "pfam-subset-2766.h3m.gz")
    parser.add_argument("--proteome", type=Path, default=DATA / "proteome-HG003687.faa")
    parser.add_argument("--largest", type=int, default=100, help="models of the largest workload [100]")
    parser.add_argument("--queries", type=int, default=20, help="queries of the long-query workload [20]")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeats", type=int, default=2, help="runs of each variant [2]")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    args.backend, args.quick, args.keep = "gpu", False, None
    place = RunPlace.of(args, "tail-default")
    work = Path(tempfile.mkdtemp(prefix="gpuhmm-tail-default-"))
    result = {
        "benchmark": "tail_default",
        "gpu": place.gpu,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),
        "host": place.host(),
        "threads": args.threads,
        "repeats": args.repeats,
        "workloads": {},
        "slowest_ratio": None,
        "errors": {},
    }
    step = Steps(result, place.out, log)
    base = [sys.executable, "-m", "gpuhmm"]
    engine = ["-o", "/dev/null", "--backend", "gpu", "--cpu", str(args.threads)]
    workloads = {
        "largest": (
            lambda: largest_models(args.models, args.largest, work / "largest.h3m"),
            [*base, "search", *engine],
            work / "largest.h3m",
            args.proteome,
        ),
        "long_queries": (
            lambda: longest_proteins(args.proteome, args.queries, work / "queries.faa"),
            [*base, "phmmer", *engine],
            work / "queries.faa",
            args.proteome,
        ),
        "tests": (
            lambda: "tests/data: pfam-test.h3m.gz x proteins.faa",
            [*base, "search", *engine],
            REPO / "tests" / "data" / "pfam-test.h3m.gz",
            REPO / "tests" / "data" / "proteins.faa",
        ),
    }
    for name, (prepare, command, queries, targets) in workloads.items():

        def measure(name=name, prepare=prepare, command=command, queries=queries, targets=targets):
            record = {"inputs": prepare(), "default_s": [], "domaindef_cpu_s": []}
            # untimed: the first search of a workload compiles the kernels for its models' lengths
            _, warmup, _, _ = timed_gpuhmm(command, work / f"{name}-warmup", queries, targets, place.env)
            record["warmup_s"] = round(warmup, 3)
            for repeat in range(args.repeats):
                for variant, extra in (("default", []), ("domaindef_cpu", ["--domaindef", "cpu"])):
                    directory = work / f"{name}-{variant}-{repeat}"
                    ran, wall, summary, _ = timed_gpuhmm([*command, *extra], directory, queries, targets, place.env)
                    record[f"{variant}_s"].append(round(wall, 3))
                    record[f"{variant}_command"] = recorded(ran, work)
                    if variant == "default":
                        for field in ("pairs_finished_on_gpu", "pairs_to_pyhmmer"):
                            record[field] = summary_field(summary, field)
            differences = compare_tables(work / f"{name}-default-0", work / f"{name}-domaindef_cpu-0")
            record["tables_identical"] = all(d is None for d in differences.values())
            for variant in ("default", "domaindef_cpu"):
                record[f"{variant}_median_s"] = round(statistics.median(record[f"{variant}_s"]), 3)
            record["ratio"] = round(record["default_median_s"] / record["domaindef_cpu_median_s"], 3)
            result["workloads"][name] = record
            log(f"{name}: default {record['default_median_s']} s, --domaindef cpu "
                f"{record['domaindef_cpu_median_s']} s, ratio {record['ratio']}")  # fmt: skip

        step(name, measure)
    ratios = [w["ratio"] for w in result["workloads"].values()]
    result["slowest_ratio"] = max(ratios) if ratios else None
    step.save()
    log(f"written {place.out}; slowest ratio {result['slowest_ratio']}")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
