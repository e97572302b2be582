#!/usr/bin/env python3
"""gpuhmm's hmmsearch report (`-o`, with and without `--noali`) and `-A` alignment against
`hmmsearch --cpu 1`'s, on models × sequences too large for the tests.

Each program runs in a scratch directory of its own, with the same relative file names, so that
the lines naming the `-A` file match. A report is compared from the line after its header block
(the lines that name the program and its options), every line except `# CPU time:` and
`# Mc/sec:`; the alignment file byte for byte.

    python benchmarks/reports.py --models pfam-subset-1000.h3m.gz --sequences proteome-HG003687.faa

Writes benchmarks/results/reports-<gpu>.json (or `--out`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from endtoend import DATA, gpu_name, gpu_tag  # noqa: E402

TIMING = ("# CPU time:", "# Mc/sec:")


def body(path):
    """A report's lines after its header block (two rules and a blank line), timing lines left out."""
    lines = Path(path).read_text().splitlines(keepends=True)
    rules = [index for index, line in enumerate(lines) if line.startswith("# - - - -")]
    return [line for line in lines[rules[1] + 2 :] if not line.startswith(TIMING)]


def timed(command, cwd):
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return round(time.perf_counter() - started, 2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, default=DATA / "pfam-subset-1000.h3m.gz", help="HMM file")
    parser.add_argument("--sequences", type=Path, default=DATA / "proteome-HG003687.faa", help="FASTA")
    parser.add_argument("--backend", default="gpu", choices=("auto", "cpu", "gpu"))
    parser.add_argument("--out", type=Path, help="JSON record [benchmarks/results/reports-<gpu>.json]")
    args = parser.parse_args(argv)
    hmmsearch = shutil.which("hmmsearch")
    if hmmsearch is None:
        raise SystemExit("hmmsearch (HMMER 3.4) must be on PATH")
    gpu = gpu_name() if args.backend != "cpu" else None
    out = args.out or HERE / "results" / f"reports-{gpu_tag(gpu) if gpu else 'cpu'}.json"
    record = {
        "gpu": gpu,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "models": args.models.name,
        "sequences": args.sequences.name,
    }
    with tempfile.TemporaryDirectory(prefix="gpuhmm-reports-") as scratch:
        theirs, ours = Path(scratch) / "hmmsearch", Path(scratch) / "gpuhmm"
        theirs.mkdir()
        ours.mkdir()
        inputs = [str(args.models.resolve()), str(args.sequences.resolve())]
        gpuhmm = [sys.executable, "-m", "gpuhmm", "search", "--backend", args.backend]
        for name, options in (("report", ["-A", "hits.sto"]), ("noali", ["--noali"])):
            arguments = [*options, "-o", f"{name}.txt", *inputs]
            record[f"hmmsearch_{name}_s"] = timed([hmmsearch, "--cpu", "1", *arguments], theirs)
            record[f"gpuhmm_{name}_s"] = timed([*gpuhmm, *arguments], ours)
            record[f"{name}_lines"] = len(body(theirs / f"{name}.txt"))
            record[f"{name}_identical"] = body(ours / f"{name}.txt") == body(theirs / f"{name}.txt")
        record["alignment_identical"] = (ours / "hits.sto").read_bytes() == (theirs / "hits.sto").read_bytes()
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
