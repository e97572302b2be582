#!/usr/bin/env python3
"""Writing a search's three tables and its `-o` report (with alignments): the writers one
after another on one thread, as gpuhmm wrote them before, against `output.tables.write_outputs`.

    python benchmarks/writing.py --residues 50e6    # the database of "Real proteins"

1. The hits: `pyhmmer.hmmsearch` (every core in the affinity mask) of the first `--first`
   models of `--models` (0: all) against the database realdata.py makes of `--proteome`:
   the proteome, then mutated copies of it up to `--residues` (realdata.mutated_database,
   rate `--mutation-rate`, seed `--seed`); one TopHits per model, in model order. The search
   takes minutes: with `--cache DIR` its hits are kept there as a pickle, named after the
   arguments, and read back by a later run.
2. `serial_s`: for each output in turn and each model in order, on one thread, pyhmmer's
   `TopHits.write` (the three tables) and `report.write_report` with the restated hit lists
   (`use_native=False`, the report): gpuhmm's writers before they ran in threads. Each
   output's share is in `serial_by_output_s`.
3. `threaded_s`: `tables.write_outputs` of the same four outputs, threads over every core in the
   affinity mask; `threaded_one_core_s` with the process held to one core
   (`os.sched_setaffinity`). With at least 4 cores, the two give by Amdahl's law the part
   that threads share (`parallel_part_s`) and the part that they do not (`serial_part_s`).
4. Every output of both ways is compared byte for byte (`identical`); both write files in a
   scratch directory, with the same footer. `writing_alone_s`: the outputs' bytes written to
   new files again, a thread each, without formatting: the floor of `threaded_s`.

Times are medians of `--repeats` runs (`--serial-repeats` for step 2, which takes long).
`extrapolated_16_cores_s` scales both parts by the hits of "Real proteins" (273,847 reported
hits, 333,809 domains: `scale_to_real_proteins`) and spreads the shared one over 16 cores. Writes
benchmarks/results/writing-<host>.json (or `--out`); it names its data files, never their
folders.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import pickle
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyhmmer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gpuhmm.hits.underflow import as_printed  # noqa: E402
from gpuhmm.options import ReportSettings  # noqa: E402
from gpuhmm.output import tables  # noqa: E402
from gpuhmm.output.report import Report, ReportHeader, write_report  # noqa: E402

from benchdb import write_fasta  # noqa: E402
from cpu_vs_pyhmmer import cpu_model  # noqa: E402
from endtoend import DATA, default_threads, host_tag, open_models  # noqa: E402
from realdata import mutated_database  # noqa: E402

#: The reported hits and domains of "Real proteins" (benchmarks/RESULTS.md).
REAL_HITS, REAL_DOMAINS = 273_847, 333_809
TABLES = (("tblout", "targets"), ("domtblout", "domains"), ("pfamtblout", "pfam"))
FOOTER = ("#", "# Program:         gpuhmm", "# [ok]")


def log(message):
    print(f"[writing {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def search(args):
    """One TopHits per model, and what the search was."""
    with open_models(args.models) as handle:
        hmms = list(handle)
    hmms = hmms[: args.first] if args.first else hmms
    residues, offsets, headers, info = mutated_database(args.proteome, args.residues, args.mutation_rate, args.seed)
    with tempfile.TemporaryDirectory(prefix="writing-") as work:
        fasta = Path(work) / "database.faa"
        write_fasta(fasta, residues, offsets, headers)
        with pyhmmer.easel.SequenceFile(str(fasta), digital=True, alphabet=hmms[0].alphabet) as handle:
            block = handle.read_block()
    started = time.perf_counter()
    hits = list(pyhmmer.hmmsearch(hmms, block, cpus=default_threads()))
    described = {"models": len(hmms), "sequences": len(block), "residues": int(offsets[-1]), "copies": info["copies"]}
    log(f"searched {described} in {time.perf_counter() - started:.1f} s")
    return hits, described


def cached_search(args):
    if args.cache is None:
        return search(args)
    key = [args.models.name, args.first, args.proteome.name, args.residues, args.mutation_rate, args.seed]
    path = args.cache / f"writing-{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}.pickle"
    if path.exists():
        with path.open("rb") as handle:
            return pickle.load(handle)
    found = search(args)
    args.cache.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as handle:
        pickle.dump(found, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return found


def serial(hits, report, directory):
    """The writers as gpuhmm ran them before: seconds per output."""
    seconds = {}
    started = time.perf_counter()
    printed = [as_printed(found) for found in hits]
    seconds["as_printed"] = time.perf_counter() - started
    for name, format in TABLES:
        started = time.perf_counter()
        with open(directory / name, "wb") as handle:
            for index, found in enumerate(printed):
                found.write(handle, format=format, header=index == 0)
            handle.write("".join(f"{line}\n" for line in FOOTER).encode())
        seconds[name] = time.perf_counter() - started
    started = time.perf_counter()
    with open(directory / "output", "w", encoding="latin-1", newline="\n") as handle:
        write_report(handle, printed, report.settings, report.header, use_native=False)
    seconds["output"] = time.perf_counter() - started
    return seconds


def threaded(hits, report, directory):
    paths = {name: directory / name for name in ("output", *(name for name, _ in TABLES))}
    started = time.perf_counter()
    tables.write_outputs(hits, paths, FOOTER, report=report)
    return time.perf_counter() - started


def writing_alone(directory, copies):
    """Seconds to write the outputs' bytes (read beforehand) to new files, a thread each, as
    `write_outputs` writes them: the floor that formatting faster cannot lower."""
    contents = {path.name: path.read_bytes() for path in directory.iterdir()}
    copies.mkdir()

    def write(name):
        with open(copies / name, "wb") as handle:
            handle.write(contents[name])

    started = time.perf_counter()
    with ThreadPoolExecutor(len(contents)) as pool:
        list(pool.map(write, contents))
    return time.perf_counter() - started


def recorded_command(arguments):
    """The command line, paths named without their folders."""
    words, paths = ["python3", "benchmarks/writing.py"], ("--models", "--proteome", "--cache", "--out")
    for before, word in zip([None, *arguments], arguments):
        words.append(Path(word).name if before in paths else word)
    return " ".join(words)


def one_core(call):
    """call() with this process held to one core of its affinity mask."""
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    try:
        return call()
    finally:
        os.sched_setaffinity(0, cores)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=DATA / "pfam-subset-2766.h3m.gz")
    parser.add_argument("--proteome", type=Path, default=DATA / "proteome-HG003687.faa")
    parser.add_argument("--first", type=int, default=0, help="models searched (0: all) [0]")
    parser.add_argument("--residues", type=float, default=17e6, help="the database's residues, at least [17e6]")
    parser.add_argument("--mutation-rate", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--cache", type=Path, help="folder for the search's hits, kept between runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--serial-repeats", type=int, default=1)
    parser.add_argument("--out", type=Path, help="JSON record [benchmarks/results/writing-<host>.json]")
    args = parser.parse_args(argv)
    out = args.out or HERE / "results" / f"writing-{host_tag()}.json"

    hits, described = cached_search(args)
    reported = sum(len(found.reported) for found in hits)
    domains = sum(len(hit.domains.reported) for found in hits for hit in found.reported)
    report = Report(ReportHeader("hmmsearch", args.models.name, "database.faa"), ReportSettings())
    cores = len(os.sched_getaffinity(0))
    record = {
        "benchmark": "writing",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": recorded_command(sys.argv[1:] if argv is None else argv),
        "host": {"cores": cores, "cpu": cpu_model(), "python": platform.python_version()},
        "pyhmmer": pyhmmer.__version__,
        "models_file": args.models.name,
        "proteome": args.proteome.name,
        **described,
        "reported_hits": reported,
        "reported_domains": domains,
        "outputs": "-o (with alignments), --tblout, --domtblout, --pfamtblout",
    }
    with tempfile.TemporaryDirectory(prefix="writing-") as work:
        before, after = Path(work) / "serial", Path(work) / "threaded"
        before.mkdir()
        after.mkdir()
        runs = [serial(hits, report, before) for _ in range(args.serial_repeats)]
        by_output = {name: statistics.median(run[name] for run in runs) for name in runs[0]}
        record["serial_by_output_s"] = {name: round(value, 3) for name, value in by_output.items()}
        record["serial_s"] = round(sum(by_output.values()), 3)
        record["threaded_s"] = round(statistics.median(threaded(hits, report, after) for _ in range(args.repeats)), 3)
        record["threaded_one_core_s"] = round(one_core(lambda: threaded(hits, report, after)), 3)
        record["bytes"] = {path.name: path.stat().st_size for path in sorted(after.iterdir())}
        record["identical"] = all(
            (before / path.name).read_bytes() == path.read_bytes() for path in sorted(after.iterdir())
        )
        record["writing_alone_s"] = round(writing_alone(after, Path(work) / "copies"), 3)
    one, many = record["threaded_one_core_s"], record["threaded_s"]
    scale = REAL_HITS / reported
    record.update(
        serial_us_per_hit=round(record["serial_s"] / reported * 1e6, 2),
        threaded_one_core_us_per_hit=round(one / reported * 1e6, 2),
        speedup=round(record["serial_s"] / many, 2),
        scale_to_real_proteins=round(scale, 3),
    )
    if cores >= 4:  # fewer cores leave the split to the noise of two timings
        parallel_part = (one - many) * cores / (cores - 1)
        serial_part = max(one - parallel_part, 0.0)
        record.update(
            parallel_part_s=round(parallel_part, 3),
            serial_part_s=round(serial_part, 3),
            extrapolated_16_cores_s=round(scale * (serial_part + parallel_part / 16), 3),
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    log(json.dumps(record, indent=2))
    return 0 if record["identical"] else 1


if __name__ == "__main__":
    sys.exit(main())
