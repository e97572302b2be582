"""A few models or one query against a large database of real proteins: wall time and peak
memory of gpuhmm against the HMMER binary and pyhmmer, each on every thread of the host, in one
run.

Run from the repository root (no GPU needed):

    python benchmarks/stream.py --models benchmarks/data/pfam-subset-2766.h3m.xz \
        --proteome benchmarks/data/proteome-HG003687.faa --counts 1 --residues 2.7e8

gpuhmm runs with `--backend` (auto: its own choice) and `--shard-memory` where given (a file
larger than that goes through the GPU in pieces); a GPU run's first search compiles the
kernels, so give it three repeats or more, whose median leaves that one out.

The database is the proteome, then mutated copies of it (`mutated.write_fasta`), to
`--residues`, written as FASTA copy by copy. `--programs` picks the searches:
- search: the first `--counts` models of `--models` (one of 132 nodes for a count of 1, the
  size of a typical Pfam family), against hmmsearch and pyhmmer.hmmsearch;
- phmmer: one query, the proteome's protein nearest 500 residues, against phmmer;
- jackhmmer: that query as AlphaFold 3 calls jackhmmer (`-N 1` and its thresholds), against
  jackhmmer.
Each program runs from files to the tables, `--repeats` times, alternating; its own process's
peak resident memory is read from `wait4`. `--peers` leaves peers out (at tens of GB they take
many minutes). Tables are compared with the binary's where it ran.

Writes benchmarks/results/stream-<host>.json (or --out):

    {"benchmark": "stream", "date", "command", "gpu", "backend", "shard_memory_gb", "host", "threads",
     "runs": [{"program", "models", "names", "residues", "fasta_bytes", "<program>": {"command",
     "wall_s": [...], "median_s", "peak_rss_mb": [...]}, "tables_identical", "gpuhmm_over_binary"}]}
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyhmmer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cpu_vs_pyhmmer import TABLES, compare_tables, cpu_model  # noqa: E402
from endtoend import (  # noqa: E402
    gpu_name,
    hmmsearch_command,
    host_tag,
    open_models,
    recorded,
    recorded_path,
    table_flags,
    table_paths,
)
from mutated import text  # noqa: E402
from mutated import write_fasta as write_mutated_fasta  # noqa: E402

REPO = HERE.parent
PYHMMER = """\
import sys, pyhmmer
models, sequences, threads, tblout, domtblout, pfamtblout = sys.argv[1:]
hmms = list(pyhmmer.plan7.HMMFile(models))
with pyhmmer.easel.SequenceFile(sequences, digital=True, alphabet=hmms[0].alphabet) as targets:
    found = list(pyhmmer.hmmsearch(hmms, targets, cpus=int(threads)))
with open(tblout, "wb") as t, open(domtblout, "wb") as d, open(pfamtblout, "wb") as p:
    for index, hits in enumerate(found):
        hits.write(t, format="targets", header=index == 0)
        hits.write(d, format="domains", header=index == 0)
        hits.write(p, format="pfam", header=index == 0)
"""


# Runs a command as a child of a small process, which writes the child's peak resident KB: a
# child forked or spawned from this process would count this process's pages as its own.
LAUNCH = """\
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def timed(command, env, log):
    """(wall seconds, peak resident MB) of `command`, its errors in `log`; raises on failure."""
    peak = Path(f"{log}.peak")
    started = time.perf_counter()
    with open(log, "wb") as errors:
        done = subprocess.run([sys.executable, "-c", LAUNCH, str(peak), *command], stdout=subprocess.DEVNULL,
                              stderr=errors, env=env)  # fmt: skip
    wall = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{shlex.join(command)} failed:\n{Path(log).read_text(errors='replace')[-2000:]}")
    return wall, int(peak.read_text()) / 1024


def chosen_models(path, count, out):
    with open_models(path) as handle:
        hmms = list(handle)
    picked = [next(hmm for hmm in hmms if hmm.M == 132)] if count == 1 else hmms[:count]
    with open(out, "wb") as handle:
        for hmm in picked:
            hmm.write(handle, binary=True)
    return [str(hmm.name) for hmm in picked[:3]]


def chosen_query(proteome, out):
    """The proteome's protein nearest 500 residues, written to `out`: its name and length."""
    with pyhmmer.easel.SequenceFile(str(proteome), digital=True) as handle:
        query = min(handle, key=lambda sequence: abs(len(sequence) - 500))
    with open(out, "wb") as handle:
        query.write(handle)
    return [text(query.name)], len(query)


#: AlphaFold 3's jackhmmer options (its msa_tool), as jackhmmer.py runs them.
ALPHAFOLD3 = ["-N", "1", "--F1", "5e-4", "--F2", "5e-5", "--F3", "5e-7", "-E", "1e-4", "--incE", "1e-4"]
#: The binary and gpuhmm command of each program, and the tables it writes.
PROGRAMS = {
    "search": ("hmmsearch", "search", TABLES),
    "phmmer": ("phmmer", "phmmer", TABLES),
    "jackhmmer": ("jackhmmer", "jackhmmer", ("tblout", "domtblout")),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--proteome", type=Path, required=True)
    parser.add_argument("--counts", default="1", help="model counts of search, comma-separated [1]")
    parser.add_argument("--residues", default="2.7e8", help="database sizes in residues, comma-separated [2.7e8]")
    parser.add_argument("--programs", default="search", help="search, phmmer, jackhmmer, comma-separated [search]")
    parser.add_argument("--peers", default="binary,pyhmmer", help="binary, pyhmmer or none [binary,pyhmmer]")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--backend", choices=("auto", "cpu", "gpu"), default="auto", help="gpuhmm's [auto]")
    parser.add_argument("--shard-memory", metavar="GB", help="gpuhmm's [its default]")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    out = args.out or HERE / "results" / f"stream-{host_tag()}.json"
    engine = ("--backend", args.backend) + (("--shard-memory", args.shard_memory) if args.shard_memory else ())
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    )
    result = {
        "benchmark": "stream",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *map(recorded_path, sys.argv)]),
        "gpu": gpu_name()[0],
        "backend": args.backend,
        "shard_memory_gb": args.shard_memory,
        "host": {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "pyhmmer": pyhmmer.__version__},
        "threads": args.threads,
        "runs": [],
    }
    peers = set(args.peers.split(","))
    with tempfile.TemporaryDirectory(prefix="gpuhmm-stream-") as scratch:
        work = Path(scratch)
        for residues in (int(float(r)) for r in args.residues.split(",")):
            fasta = work / "db.faa"
            write_mutated_fasta(args.proteome, residues, 0.15, 20261121, fasta)
            for kind in args.programs.split(","):
                binary_name, command_name, tables = PROGRAMS[kind]
                for count in (int(c) for c in args.counts.split(",")) if kind == "search" else [1]:
                    queries = work / ("models.h3m" if kind == "search" else "query.faa")
                    run = {"program": kind, "models": count, "residues": residues, "fasta_bytes": fasta.stat().st_size}
                    if kind == "search":
                        run["names"] = chosen_models(args.models, count, queries)
                    else:
                        run["names"], run["query_length"] = chosen_query(args.proteome, queries)
                    programs = ["gpuhmm"] + [name for name in ("binary", "pyhmmer") if name in peers]
                    programs = [name for name in programs if name != "pyhmmer" or kind == "search"]
                    for _ in range(args.repeats):
                        for name in programs:
                            paths = {flag: path for flag, path in table_paths(work / name).items() if flag in tables}
                            words = (kind, command_name, binary_name, paths, queries, fasta, args.threads, engine)
                            command = program(name, *words)
                            wall, rss = timed(command, env, work / f"{name}.log")
                            entry = run.setdefault(
                                name, {"command": recorded(command, work), "wall_s": [], "peak_rss_mb": []}
                            )
                            entry["wall_s"].append(round(wall, 3))
                            entry["peak_rss_mb"].append(round(rss, 1))
                            line = f"{kind} {count} x {residues:.3g} residues, {name}: {wall:.2f} s, {rss:.0f} MB"
                            print(f"[stream] {line}", file=sys.stderr, flush=True)
                    for name in programs:
                        run[name]["median_s"] = round(statistics.median(run[name]["wall_s"]), 3)
                    if "binary" in programs:
                        differences = compare_tables(work / "gpuhmm", work / "binary", tables)
                        run["tables_identical"] = all(d is None for d in differences.values())
                        run["gpuhmm_over_binary"] = round(run["gpuhmm"]["median_s"] / run["binary"]["median_s"], 3)
                    result["runs"].append(run)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"[stream] written {out}", file=sys.stderr)
    return 0


def program(name, kind, command_name, binary_name, paths, queries, fasta, threads, engine):
    """The command line of `name` (gpuhmm, binary, pyhmmer) running `kind`, its tables at `paths`
    (gpuhmm's with the `engine` options)."""
    options = ALPHAFOLD3 if kind == "jackhmmer" else []
    if name == "binary":
        binary = shutil.which(binary_name)
        if kind == "search":
            return hmmsearch_command(binary, threads, paths, queries, fasta)
        return [binary, "--cpu", str(threads), "--noali", "-o", os.devnull, *options, *table_flags(paths),
                str(queries), str(fasta)]  # fmt: skip
    if name == "pyhmmer":
        tables = [str(paths[flag]) for flag in ("tblout", "domtblout", "pfamtblout")]
        return [sys.executable, "-c", PYHMMER, str(queries), str(fasta), str(threads), *tables]
    return [sys.executable, "-m", "gpuhmm", command_name, "-o", os.devnull, "--cpu", str(threads), *engine, *options,
            *table_flags(paths), str(queries), str(fasta)]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
