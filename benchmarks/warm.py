"""Small searches from command to tables, cold (each starting its own cluster) and against a warm
cluster (`gpuhmm cluster`) that keeps its workers, models and kernels between searches.

Run on the GPU machine, from the repository root:

    python benchmarks/warm.py --job test tests/data/pfam-test.h3m.gz tests/data/proteins.faa \
        --job first50 benchmarks/data/pfam-subset-1000-first50.h3m benchmarks/data/proteome-HG003687.faa

Each job runs `--repeats` times cold, then the cluster starts, then each job runs `--repeats`
times against it; the tables of every run must equal the first cold run's. Wall times are of the
whole `python -m gpuhmm search` process; `client_import_s` is a process that only imports Dask's
client. Writes benchmarks/results/warm-<gpu>.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_vs_pyhmmer import compare_tables  # noqa: E402
from endtoend import gpu_name, gpu_tag, table_flags, table_paths  # noqa: E402


def _timed(command):
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", nargs=3, action="append", metavar=("NAME", "HMMFILE", "SEQFILE"), required=True)
    parser.add_argument("--backend", default="gpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    search = [sys.executable, "-m", "gpuhmm", "search", "-o", "/dev/null", "--backend", args.backend]
    result = {"jobs": {}}
    with tempfile.TemporaryDirectory(prefix="gpuhmm-warm-") as scratch:
        scratch = Path(scratch)

        def run(name, label, extra, models, sequences):
            directory = scratch / f"{name}-{label}"
            directory.mkdir()
            seconds = _timed([*search, *extra, *table_flags(table_paths(directory)), models, sequences])
            return directory, seconds

        runs = {}
        for name, models, sequences in args.job:
            runs[name] = {"cold": [run(name, f"cold{r}", [], models, sequences) for r in range(args.repeats)]}
        scheduler_file = scratch / "scheduler.json"
        started = time.perf_counter()
        cluster = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuhmm",
                "cluster",
                "--backend",
                args.backend,
                "--scheduler-file",
                str(scheduler_file),
            ],
            stdout=subprocess.DEVNULL,
        )
        try:
            while not scheduler_file.exists():
                if cluster.poll() is not None:
                    raise SystemExit("gpuhmm cluster stopped before it was ready")
                time.sleep(0.05)
            result["cluster_start_s"] = round(time.perf_counter() - started, 3)
            warm = ["--scheduler", str(scheduler_file)]
            for name, models, sequences in args.job:
                runs[name]["warm"] = [run(name, f"warm{r}", warm, models, sequences) for r in range(args.repeats)]
        finally:
            cluster.send_signal(signal.SIGTERM)
            cluster.wait(60)
        for name, kinds in runs.items():
            reference = kinds["cold"][0][0]
            result["jobs"][name] = {
                **{f"{kind}_s": [round(seconds, 3) for _, seconds in found] for kind, found in kinds.items()},
                "tables_identical": all(
                    not any(compare_tables(reference, directory).values())
                    for found in kinds.values()
                    for directory, _ in found
                ),
            }
    # The floor of any search against a warm cluster: a new process importing Dask's client.
    result["client_import_s"] = round(_timed([sys.executable, "-c", "import distributed"]), 3)
    result = {
        "benchmark": "warm",
        "gpu": gpu_name()[0] if args.backend != "cpu" else None,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *sys.argv]),
        **result,
    }
    out = args.out or Path(__file__).parent / "results" / f"warm-{gpu_tag(result['gpu']) or 'cpu'}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
