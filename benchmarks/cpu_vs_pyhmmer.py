#!/usr/bin/env python3
"""Wall time of `gpuhmm search --backend cpu` against `pyhmmer.hmmsearch` on the same host.

Three timings per repeat, all with the same number of threads:

* gpuhmm           `gpuhmm search --backend cpu --cpu N --tblout/--domtblout/--pfamtblout`
                   as a subprocess: the real CLI, from files to the three tables.
* peer_call        `pyhmmer.hmmsearch(hmms, seqs, cpus=N)` alone, inside this process,
                   with models and sequences already in memory.
* peer_end_to_end  a subprocess (this script in its `--peer-end-to-end` mode) that reads
                   the same model file and FASTA, runs `pyhmmer.hmmsearch(cpus=N)` and
                   writes the three tables with `TopHits.write`, in model order.

The order gpuhmm / peers alternates between repeats. The tables of gpuhmm and of the
end-to-end peer are compared (gpuhmm's trailing HMMER footer left out) in every repeat.
Results go to a JSON file and a short summary is printed. Timing belongs here, never in
tests.
"""

import argparse
import datetime
import gzip
import json
import os
import platform
import re
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The benchmarks' data folder (git-ignored): see benchmarks/README.md.
DEFAULT_DATA = REPO / "benchmarks" / "data"
DEFAULT_MODELS = "pfam-subset-2766.h3m.gz"
DEFAULT_SEQUENCES = "proteome-HG003687.faa"
TABLES = {"tblout": "targets", "domtblout": "domains", "pfamtblout": "pfam"}


def default_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def open_models(path):
    """A pyhmmer HMMFile; gzip is read through Python's gzip module (no `gzip` pipe)."""
    from pyhmmer.plan7 import HMMFile

    path = Path(path)
    with open(path, "rb") as handle:
        magic = handle.read(2)
    if magic == b"\x1f\x8b":
        return HMMFile(gzip.open(path, "rb"))
    return HMMFile(path)


def read_models(path, first):
    """The first `first` models of `path` (all of them when `first` is None)."""
    models = []
    with open_models(path) as hmm_file:
        for hmm in hmm_file:
            if first is not None and len(models) >= first:
                break
            models.append(hmm)
    return models


def read_sequences(path, alphabet):
    from pyhmmer.easel import SequenceFile

    with SequenceFile(str(path), digital=True, alphabet=alphabet) as seq_file:
        return seq_file.read_block()


def peer_end_to_end(models_path, sequences_path, out_dir, cpus):
    """The end-to-end peer: files in, hmmsearch, three tables out (run as a subprocess)."""
    import pyhmmer

    with open_models(models_path) as hmm_file:
        hmms = list(hmm_file)
    seqs = read_sequences(sequences_path, hmms[0].alphabet)
    out_dir = Path(out_dir)
    handles = {flag: open(out_dir / f"{flag}.txt", "wb") for flag in TABLES}
    try:
        for index, hits in enumerate(pyhmmer.hmmsearch(hmms, seqs, cpus=cpus)):
            for flag, fmt in TABLES.items():
                hits.write(handles[flag], format=fmt, header=(index == 0))
    finally:
        for handle in handles.values():
            handle.close()


def strip_footer(text):
    """Everything before the footer block: the `#` line right before `# Program:`."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if line.startswith("# Program:"):
            cut = index - 1 if index > 0 and lines[index - 1].strip() == "#" else index
            return "".join(lines[:cut])
    return text


def compare_tables(gpuhmm_dir, peer_dir, tables=TABLES):
    """Per table of `tables`: None when equal, otherwise a description of the first difference."""
    report = {}
    for flag in tables:
        ours = strip_footer((Path(gpuhmm_dir) / f"{flag}.txt").read_text())
        theirs = strip_footer((Path(peer_dir) / f"{flag}.txt").read_text())
        if ours == theirs:
            report[flag] = None
            continue
        a, b = ours.splitlines(), theirs.splitlines()
        line = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        report[flag] = {
            "gpuhmm_lines": len(a),
            "peer_lines": len(b),
            "first_difference_line": line + 1,
            "gpuhmm": a[line] if line < len(a) else None,
            "peer": b[line] if line < len(b) else None,
        }
    return report


def run_timed(command, log):
    start = time.perf_counter()
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout.decode(errors="replace"))
        raise SystemExit(f"{log} failed (exit {completed.returncode}): {shlex.join(command)}")
    return wall


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def host_tag():
    tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", socket.gethostname().split(".")[0]).strip("-.")
    return tag or "local"


def gpuhmm_command():
    found = shutil.which("gpuhmm", path=str(Path(sys.executable).parent)) or shutil.which("gpuhmm")
    return [found] if found else [sys.executable, "-m", "gpuhmm"]


def summarise(walls, threads=None, gcups_work=None, name=None):
    median = statistics.median(walls)
    entry = {}
    if name:
        entry["name"] = name
    if threads is not None:
        entry["threads"] = threads
    entry["wall_s"] = [round(w, 3) for w in walls]
    entry["median_s"] = round(median, 3)
    if gcups_work is not None:
        entry["gcups"] = round(gcups_work / median / 1e9, 3)
    return entry


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="data directory [benchmarks/data]")
    parser.add_argument("--models", type=Path, help=f"HMM file (text/binary, gzip allowed) [DATA/{DEFAULT_MODELS}]")
    parser.add_argument("--first", type=int, default=300, help="use the first N models; 0 for all [300]")
    parser.add_argument("--sequences", type=Path, help=f"FASTA [DATA/{DEFAULT_SEQUENCES}]")
    parser.add_argument(
        "--cpus", type=int, default=default_cpus(), help="threads for both tools [all cores in the affinity mask]"
    )
    parser.add_argument("--repeats", type=int, default=3, help="repeats [3]")
    parser.add_argument("--out", type=Path, help="result JSON [benchmarks/results/cpu-HOST-Ncpu.json]")
    parser.add_argument("--keep", type=Path, help="keep the work files (model file, tables) here")
    parser.add_argument(
        "--peer-end-to-end", nargs=4, metavar=("MODELS", "SEQS", "OUTDIR", "CPUS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)

    if args.peer_end_to_end:
        models_path, seqs_path, out_dir, cpus = args.peer_end_to_end
        peer_end_to_end(models_path, seqs_path, out_dir, int(cpus))
        return 0

    import pyhmmer

    try:
        from gpuhmm import __version__ as gpuhmm_version
    except ImportError:
        gpuhmm_version = None

    if args.cpus < 1 or args.repeats < 1:
        parser.error("--cpus and --repeats must be at least 1")
    models_source = args.models or args.data / DEFAULT_MODELS
    sequences = (args.sequences or args.data / DEFAULT_SEQUENCES).resolve()
    first = args.first or None
    out = args.out or REPO / "benchmarks" / "results" / f"cpu-{host_tag()}-{args.cpus}cpu.json"
    command_line = shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="gpuhmm-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        hmms = read_models(models_source, first)
        if not hmms:
            raise SystemExit(f"no models in {models_source}")
        models_path = work / "models.h3m"
        with open(models_path, "wb") as handle:
            for hmm in hmms:
                hmm.write(handle, binary=True)
        seqs = read_sequences(sequences, hmms[0].alphabet)
        model_nodes = sum(hmm.M for hmm in hmms)
        residues = sum(len(seq) for seq in seqs)
        work_units = model_nodes * residues
        print(
            f"{len(hmms)} models ({model_nodes} nodes) x {len(seqs)} sequences "
            f"({residues} residues), {args.cpus} cpus, {args.repeats} repeats",
            flush=True,
        )

        gpuhmm_dir, peer_dir = work / "gpuhmm", work / "peer"
        gpuhmm_dir.mkdir(exist_ok=True)
        peer_dir.mkdir(exist_ok=True)
        gpuhmm_cmd = [
            *gpuhmm_command(),
            "search",
            "-o",
            os.devnull,
            "--backend",
            "cpu",
            "--cpu",
            str(args.cpus),
            *(arg for flag in TABLES for arg in (f"--{flag}", str(gpuhmm_dir / f"{flag}.txt"))),
            str(models_path),
            str(sequences),
        ]
        peer_cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--peer-end-to-end",
            str(models_path),
            str(sequences),
            str(peer_dir),
            str(args.cpus),
        ]

        def time_gpuhmm():
            return run_timed(gpuhmm_cmd, "gpuhmm")

        def time_peer_call():
            start = time.perf_counter()
            hits = list(pyhmmer.hmmsearch(hmms, seqs, cpus=args.cpus))
            wall = time.perf_counter() - start
            del hits
            return wall

        def time_peer_end_to_end():
            return run_timed(peer_cmd, "peer end to end")

        walls = {"gpuhmm": [], "peer_call": [], "peer_end_to_end": []}
        comparisons = []
        for repeat in range(args.repeats):
            order = ["gpuhmm", "peer_call", "peer_end_to_end"]
            if repeat % 2:
                order = ["peer_call", "peer_end_to_end", "gpuhmm"]
            timers = {"gpuhmm": time_gpuhmm, "peer_call": time_peer_call, "peer_end_to_end": time_peer_end_to_end}
            for name in order:
                walls[name].append(timers[name]())
            comparison = compare_tables(gpuhmm_dir, peer_dir)
            comparisons.append(comparison)
            print(
                f"repeat {repeat + 1}/{args.repeats} ({' -> '.join(order)}): "
                + ", ".join(f"{name} {walls[name][-1]:.2f}s" for name in order)
                + ("" if all(v is None for v in comparison.values()) else ", TABLES DIFFER"),
                flush=True,
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    gpuhmm_entry = summarise(walls["gpuhmm"])
    call_entry = summarise(walls["peer_call"], args.cpus, work_units, "pyhmmer.hmmsearch")
    e2e_entry = summarise(walls["peer_end_to_end"], args.cpus, work_units, "pyhmmer.hmmsearch")
    gpuhmm_median = statistics.median(walls["gpuhmm"])
    tables_identical = all(v is None for c in comparisons for v in c.values())
    result = {
        "benchmark": "cpu_vs_pyhmmer",
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command_line,
        "host": {
            "cpus": args.cpus,
            "cpu_model": cpu_model(),
            "python": platform.python_version(),
            "pyhmmer": pyhmmer.__version__,
            "gpuhmm": gpuhmm_version,
        },
        "models": len(hmms),
        "models_file": str(models_source),
        "model_nodes": model_nodes,
        "sequences": len(seqs),
        "sequences_file": str(sequences),
        "residues": residues,
        "repeats": args.repeats,
        "gpuhmm": {**gpuhmm_entry, "command": shlex.join(gpuhmm_cmd)},
        "peer_call": call_entry,
        "peer_end_to_end": e2e_entry,
        "ratio_vs_call": round(gpuhmm_median / statistics.median(walls["peer_call"]), 3),
        "ratio_vs_end_to_end": round(gpuhmm_median / statistics.median(walls["peer_end_to_end"]), 3),
        "tables_identical": tables_identical,
    }
    if not tables_identical:
        result["table_differences"] = [
            {flag: diff for flag, diff in c.items() if diff is not None} for c in comparisons
        ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"gpuhmm (CLI, end to end)      median {gpuhmm_entry['median_s']:.2f}s")
    print(f"pyhmmer.hmmsearch call only   median {call_entry['median_s']:.2f}s ({call_entry['gcups']:.2f} GCUPS)")
    print(f"pyhmmer end to end            median {e2e_entry['median_s']:.2f}s ({e2e_entry['gcups']:.2f} GCUPS)")
    print(
        f"ratio gpuhmm / call {result['ratio_vs_call']:.3f}, "
        f"gpuhmm / end to end {result['ratio_vs_end_to_end']:.3f}, "
        f"tables identical: {tables_identical}"
    )
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
