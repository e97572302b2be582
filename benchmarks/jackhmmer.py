"""gpuhmm jackhmmer end to end against pyhmmer.hmmer.jackhmmer and the jackhmmer binary.

Run on the GPU machine, from the repository root:

    python benchmarks/jackhmmer.py                          # 20 queries x >= 500M residues
    python benchmarks/jackhmmer.py --quick --backend cpu    # 3 queries x ~1M residues, no GPU

In one run, on one host, with N = every host thread:

1. Queries: `--queries` real proteins of 100 to 600 residues drawn from `--proteome` with
   `--seed` (Python's random.Random), in proteome order, as one FASTA file.
2. The database: realdata.py's (`realdata.mutated_database`): the proteome's distinct proteins,
   then mutated copies of them up to `--residues`, so each query meets its own protein and its
   mutated copies, and the rounds have homologs to include.
3. Two option sets, each in turn: AlphaFold 3's call (`-o /dev/null -A --noali --F1 5e-4 --F2
   5e-5 --F3 5e-7 -N 1 -E 1e-4 --incE 1e-4`) and `-N 3` (jackhmmer's defaults otherwise).
   a. Warm-up (GPU only, once): a preload of the kernels every query's model uses (a round's
      model keeps its query's length), so NVRTC's kernels are compiled into the disk cache
      before the timed runs (`compile_warmup_s`).
   b. `python -m gpuhmm jackhmmer --backend B --cpu N` with `-A`, `--tblout`, `--domtblout` on
      every query, as a subprocess: cold, timed from files to outputs (`gpuhmm_wall_s`).
   c. The peer: `pyhmmer.hmmer.jackhmmer(queries, block, cpus=N)` with the same thresholds and
      round limit, the sequences read beforehand (timed apart), fully consumed; each query's
      last hits are written as tables afterwards, named by the query sequence as jackhmmer
      names them, and compared with gpuhmm's (`peer_tables_identical`).
   d. The jackhmmer binary with `--cpu N` on the first `--sample` queries, with every output
      (`-o`, `-A`, both tables, `--chkhmm`, `--chkali`), and gpuhmm with the same outputs on
      the same queries; compared as the tests compare them (`binary_identical`: the report but
      its header block and CPU-time lines, the tables but their footers, the alignments, the
      checkpoint models but their DATE lines, the checkpoint alignments). The binary's time
      scales by queries to all of them (`binary_wall_s_all_queries`).

Writes benchmarks/results/jackhmmer-<gpu>.json (jackhmmer-cpu-<host>.json without a GPU,
-quick before .json for --quick; or --out) after every step, commands recorded without host
paths (`endtoend.recorded`). Timing belongs here, never in tests.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import random
import shlex
import shutil
import sys
import time
from pathlib import Path

import pyhmmer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchdb import read_digital, write_fasta  # noqa: E402
from cpu_vs_pyhmmer import strip_footer  # noqa: E402
from endtoend import DATA, RunPlace, Steps, default_threads, recorded, recorded_path, run_timed  # noqa: E402
from mutated import text  # noqa: E402
from realdata import mutated_database  # noqa: E402

DEFAULT_PROTEOME = DATA / "proteome-HG003687.faa"
QUICK = {"queries": 3, "residues": 1_000_000, "sample": 3}
FULL = {"queries": 20, "residues": 500_000_000, "sample": 3}
#: AlphaFold 3's jackhmmer call (its data pipeline), less `-o`, `-A` and `--cpu`.
MODES = {
    "alphafold3": [
        "--noali",
        "--F1",
        "5e-4",
        "--F2",
        "5e-5",
        "--F3",
        "5e-7",
        "-N",
        "1",
        "-E",
        "1e-4",
        "--incE",
        "1e-4",
    ],
    "N3": ["-N", "3"],
}
#: The same options as pyhmmer.hmmer.jackhmmer's keyword arguments.
PEER_OPTIONS = {
    "alphafold3": {"max_iterations": 1, "F1": 5e-4, "F2": 5e-5, "F3": 5e-7, "E": 1e-4, "incE": 1e-4},
    "N3": {"max_iterations": 3},
}


# Load (or compile) the kernels of models as long as the queries, as realdata.py's warm-up does.
PRELOAD = """\
import sys
import pyhmmer
from gpuhmm.engine.gpu import GpuEngine
with pyhmmer.easel.SequenceFile(sys.argv[1], digital=True) as queries:
    GpuEngine().preload([len(query) for query in queries])
"""


def portable(word):
    """A word of a command as a result records it: paths in the repository relative to it, any
    other absolute path by its file name."""
    word = recorded_path(word)
    return Path(word).name if word.startswith("/") else word


def log(message):
    print(f"[jackhmmer {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def jackhmmer_binary():
    """HMMER's jackhmmer: the `hmmer` wheel's own binary (its PATH entry is a wrapper), else PATH."""
    try:
        import hmmer
    except ImportError:
        return shutil.which("jackhmmer")
    candidate = Path(hmmer.__file__).parent / "data" / "bin" / "jackhmmer"
    return str(candidate) if os.access(candidate, os.X_OK) else shutil.which("jackhmmer")


def pick_queries(proteome, count, seed):
    """`count` proteins of 100 to 600 residues, drawn with `seed`, in proteome order."""
    sequences = read_digital(proteome, pyhmmer.easel.Alphabet.amino())
    eligible = [index for index, sequence in enumerate(sequences) if 100 <= len(sequence.sequence) <= 600]
    chosen = sorted(random.Random(seed).sample(eligible, count))
    return [sequences[index] for index in chosen]


def write_queries(path, sequences):
    alphabet = pyhmmer.easel.Alphabet.amino()
    with open(path, "w") as handle:
        for sequence in sequences:
            description = text(sequence.description)
            header = f"{text(sequence.name)} {description}" if description else text(sequence.name)
            handle.write(f">{header}\n{alphabet.decode(sequence.sequence)}\n")


def outputs(directory, full):
    """The output flags of a run into `directory` (relative names: runs in it name them alike)."""
    words = ["-A", "out.sto", "--tblout", "out.tbl", "--domtblout", "out.domtbl"]
    if full:
        words += ["-o", "out.txt", "--chkhmm", "chk", "--chkali", "chk"]
    else:
        words += ["-o", os.devnull]
    directory.mkdir(parents=True, exist_ok=True)
    return words


def run_in(directory, command, env=None):
    """Wall seconds of `command` run in `directory` (its log beside it)."""
    with contextlib.chdir(directory):
        return run_timed(command, directory.with_suffix(".log"), env)


def report_body(path):
    """A report without its header block (up to the second rule) and its CPU-time lines."""
    lines = Path(path).read_text(encoding="latin-1").splitlines(keepends=True)
    rules = [index for index, line in enumerate(lines) if line.startswith("# - - - -")]
    body = lines[rules[1] + 2 :] if len(rules) >= 2 else lines
    return "".join(line for line in body if not line.startswith(("# CPU time:", "# Mc/sec:")))


def without_dates(path):
    return "".join(line for line in Path(path).open(encoding="latin-1") if not line.startswith("DATE "))


def compared(ours, theirs):
    """None when equal, else the first differing line of each."""
    if ours == theirs:
        return None
    a, b = ours.splitlines(), theirs.splitlines()
    line = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return {"line": line + 1, "gpuhmm": a[line] if line < len(a) else None, "peer": b[line] if line < len(b) else None}


def compare_runs(ours, theirs, rounds):
    """Every output of two runs with the same relative names, as the tests compare them."""
    checks = {
        "report": lambda d: report_body(d / "out.txt"),
        "tblout": lambda d: strip_footer((d / "out.tbl").read_text()),
        "domtblout": lambda d: strip_footer((d / "out.domtbl").read_text()),
        "alignments": lambda d: (d / "out.sto").read_text(encoding="latin-1"),
    }
    for number in range(1, rounds + 1):
        checks[f"chkhmm-{number}"] = lambda d, n=number: (
            without_dates(d / f"chk-{n}.hmm") if (d / f"chk-{n}.hmm").exists() else ""
        )
        checks[f"chkali-{number}"] = lambda d, n=number: (
            (d / f"chk-{n}.sto").read_text(encoding="latin-1") if (d / f"chk-{n}.sto").exists() else ""
        )
    return {name: compared(read(ours), read(theirs)) for name, read in checks.items()}


def peer_tables(queries, block, threads, options, directory):
    """pyhmmer.hmmer.jackhmmer on the preloaded `block`: (wall seconds, per-query rounds), and
    its last hits' tables in `directory`, each query's named by its sequence as jackhmmer does."""
    arguments = dict(options)
    rounds = arguments.pop("max_iterations")
    started = time.perf_counter()
    results = list(pyhmmer.hmmer.jackhmmer(queries, block, cpus=threads, max_iterations=rounds, **arguments))
    wall = time.perf_counter() - started
    with open(directory / "out.tbl", "wb") as targets, open(directory / "out.domtbl", "wb") as domains:
        for index, (query, result) in enumerate(zip(queries, results)):
            named = pyhmmer.plan7.TopHits(query)
            named.__setstate__(result.hits.__getstate__())
            named.write(targets, format="targets", header=index == 0)
            named.write(domains, format="domains", header=index == 0)
    return wall, [result.iteration for result in results]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proteome", type=Path, default=DEFAULT_PROTEOME, help="real proteins [benchmarks/data/]")
    parser.add_argument("--queries", type=int, help=f"queries [{FULL['queries']}; quick: {QUICK['queries']}]")
    parser.add_argument("--residues", type=float, help=f"database residues [{FULL['residues']:.0e}; quick: 1e6]")
    parser.add_argument("--sample", type=int, help=f"queries the binary runs [{FULL['sample']}]")
    parser.add_argument("--mutation-rate", type=float, default=0.15, help="as realdata.py [0.15]")
    parser.add_argument("--seed", type=int, default=20261121, help="queries and mutations [20261121]")
    parser.add_argument("--threads", type=int, default=default_threads(), help="threads for every tool [all]")
    parser.add_argument("--backend", choices=("gpu", "cpu", "auto"), default="gpu", help="gpuhmm's --backend [gpu]")
    parser.add_argument("--modes", nargs="+", choices=tuple(MODES), default=list(MODES), help="option sets [both]")
    parser.add_argument("--quick", action="store_true", help="3 queries x 1e6 residues")
    parser.add_argument("--out", type=Path, help="result JSON [benchmarks/results/jackhmmer-<gpu>.json]")
    parser.add_argument("--keep", type=Path, help="keep the scratch files here")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    count = args.queries or preset["queries"]
    sample = min(count, args.sample or preset["sample"])
    target = int(args.residues or preset["residues"])
    threads = args.threads
    place = RunPlace.of(args, "jackhmmer")
    work, env = place.work, place.env
    binary = jackhmmer_binary()
    result = {
        "benchmark": "jackhmmer",
        "gpu": place.gpu,
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *map(portable, sys.argv)]),
        "backend": args.backend,
        "quick": args.quick,
        "host": place.host(),
        "threads": threads,
        "queries": count,
        "binary_sample": sample,
        "modes": {},
        "errors": {},
    }
    step = Steps(result, place.out, log)
    state = {}

    def inputs():
        queries = pick_queries(args.proteome, count, args.seed)
        state["queries"] = queries
        state["queries_path"] = work / "queries.faa"
        state["sample_path"] = work / "sample.faa"
        write_queries(state["queries_path"], queries)
        write_queries(state["sample_path"], queries[:sample])
        residues, offsets, headers, info = mutated_database(args.proteome, target, args.mutation_rate, args.seed)
        state["db_path"] = work / "db.faa"
        write_fasta(state["db_path"], residues, offsets, headers)
        result["query_names"] = [text(query.name) for query in queries]
        result["query_residues"] = sum(len(query.sequence) for query in queries)
        result.update(sequences=len(headers), residues=int(offsets[-1]), database=info)
        info["proteome"] = portable(info["proteome"])
        started = time.perf_counter()
        with pyhmmer.easel.SequenceFile(str(state["db_path"]), digital=True, alphabet=queries[0].alphabet) as handle:
            state["block"] = handle.read_block()
        result["peer_read_s"] = round(time.perf_counter() - started, 3)
        log(f"{count} queries, {len(headers)} sequences, {int(offsets[-1])} residues")

    if not step("inputs", inputs) and "block" not in state:
        raise SystemExit("no inputs")
    gpuhmm = [sys.executable, "-m", "gpuhmm", "jackhmmer", "--backend", args.backend, "--cpu", str(threads)]

    def warmup():
        if args.backend != "cpu":
            command = [sys.executable, "-c", PRELOAD, str(state["queries_path"])]
            result["compile_warmup_s"] = round(run_timed(command, work / "preload.log", env), 3)

    step("warm-up", warmup)
    for mode in args.modes:
        record = result["modes"].setdefault(mode, {"options": shlex.join(MODES[mode])})
        base = work / mode

        def gpuhmm_all(mode=mode, base=base, record=record):
            directory = base / "gpuhmm"
            command = [
                *gpuhmm,
                *MODES[mode],
                *outputs(directory, False),
                str(state["queries_path"]),
                str(state["db_path"]),
            ]
            wall = run_in(directory, command, env)
            record.update(gpuhmm_command=recorded(command, work), gpuhmm_wall_s=round(wall, 3))
            log(f"{mode}: gpuhmm {wall:.1f} s")

        def peer(mode=mode, base=base, record=record):
            directory = base / "peer"
            directory.mkdir(parents=True, exist_ok=True)
            wall, rounds = peer_tables(state["queries"], state["block"], threads, PEER_OPTIONS[mode], directory)
            ours = base / "gpuhmm"
            differences = {
                name: compared(strip_footer((ours / name).read_text()), (directory / name).read_text())
                for name in ("out.tbl", "out.domtbl")
            }
            record.update(
                peer=f"pyhmmer.hmmer.jackhmmer(cpus={threads}) {pyhmmer.__version__}",
                peer_wall_s=round(wall, 3),
                peer_rounds=rounds,
                peer_tables_identical=not any(differences.values()),
                peer_differences={k: v for k, v in differences.items() if v},
            )
            if record.get("gpuhmm_wall_s"):
                record["speedup_vs_pyhmmer"] = round(wall / record["gpuhmm_wall_s"], 2)
            log(f"{mode}: pyhmmer {wall:.1f} s, tables identical: {record['peer_tables_identical']}")

        def versus_binary(mode=mode, base=base, record=record):
            rounds = int(MODES[mode][MODES[mode].index("-N") + 1])
            ours, theirs = base / "gpuhmm-sample", base / "binary-sample"
            sample_in = [str(state["sample_path"]), str(state["db_path"])]
            command = [*gpuhmm, *MODES[mode], *outputs(ours, True), *sample_in]
            record["gpuhmm_sample_wall_s"] = round(run_in(ours, command, env), 3)
            reference = ["--cpu", str(threads), *MODES[mode], *outputs(theirs, True), *sample_in]
            wall = run_in(theirs, [binary, *reference])
            differences = compare_runs(ours, theirs, rounds)
            record.update(
                binary_command=recorded(["jackhmmer", *reference], work),
                binary_wall_s=round(wall, 3),
                binary_wall_s_all_queries=round(wall * count / sample, 3),
                binary_identical=not any(differences.values()),
                binary_differences={k: v for k, v in differences.items() if v},
            )
            if record.get("gpuhmm_wall_s"):
                record["speedup_vs_binary"] = round(record["binary_wall_s_all_queries"] / record["gpuhmm_wall_s"], 2)
            log(f"{mode}: jackhmmer {wall:.1f} s on {sample} queries, identical: {record['binary_identical']}")

        step(f"{mode} gpuhmm", gpuhmm_all)
        step(f"{mode} pyhmmer", peer)
        if binary:
            step(f"{mode} jackhmmer binary", versus_binary)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    step.save()
    log(f"written {place.out}")


if __name__ == "__main__":
    main()
