#!/usr/bin/env python3
"""Run the real HMMER 3.4 `hmmsearch` (and `phmmer`) to produce golden output tables.

For every (target set, option case) pair listed in RUNS this runs (leaving
out the --<format> options of formats not stored for that pair)

    hmmsearch -o /dev/null --cpu 1 <case options...>
              --tblout golden/<set>.<case>.tblout
              --domtblout golden/<set>.<case>.domtblout
              --pfamtblout golden/<set>.<case>.pfamtblout
              <hmmfile> <seqfile>

from inside this directory (so the file names in the footers are relative),
and writes golden/cases.json (case name -> list of hmmsearch arguments) and
golden/runs.json (set name -> hmm file, sequence file, and for each case run
the list of table formats stored). PHMMER_RUNS are run the same way with
`phmmer` (query file in place of the hmm file) and listed in
golden/phmmer-runs.json; SCAN_RUNS with `hmmscan` on the hmmpress'ed models,
listed in golden/scan-runs.json.

Output is deterministic except for the footer block that hmmsearch appends to
each table (the lines from "# Program:" to "# [ok]", which include the binary
path, current directory and date).

Run make_test_data.py first.  Requires the HMMER 3.4 `hmmsearch` binary (PATH
or the PyPI `hmmer` package's data/bin folder); use --hmmsearch to override.
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from helpers import binaries as hmmer_binaries  # noqa: E402  (tests/helpers/binaries.py)

HERE = os.path.dirname(os.path.abspath(__file__))

CASES = {
    "defaults": [],
    "evalue": ["-E", "1e-5", "--domE", "1e-3", "-Z", "1000000"],
    "bitscore": ["-T", "20", "--domT", "15"],
    "cut_ga": ["--cut_ga"],
    "cut_tc": ["--cut_tc"],
    "cut_nc": ["--cut_nc"],
    "max": ["--max", "--seed", "7"],
    "nobias": ["--nobias", "--incE", "1e-3", "--incdomE", "1e-2", "--domZ", "123", "-Z", "5000"],
}

FORMATS = ("tblout", "domtblout", "pfamtblout")
ALL = list(FORMATS)

# target set name -> (hmm file, sequence file, {case: [formats]}).
# Not every combination is stored, to keep golden/ at about 2 MB: --max
# reports ~1,100 weak hits on proteins.faa, so its pfamtblout (~0.5 MB, the
# same numbers as the other two tables) is left out, and heldout.faa only
# gets the two cases acceptance tests need.
RUNS = {
    "proteins": (
        "pfam-test.h3m.gz",
        "proteins.faa",
        {c: (["tblout", "domtblout"] if c == "max" else ALL) for c in CASES},
    ),
    "heldout": ("pfam-test.h3m.gz", "heldout.faa", {"defaults": ALL, "cut_ga": ALL}),
    "tiny_proteins": ("pfam-tiny.hmm", "proteins.faa", {c: ALL for c in CASES}),
}

# phmmer runs: set name -> (query file, sequence file, {case: [formats]}), written
# to golden/phmmer-runs.json. The queries are real proteins of heldout.faa.
PHMMER_RUNS = {
    "phmmer": ("phmmer-queries.faa", "proteins.faa", {"defaults": ALL, "evalue": ALL}),
    "phmmer_heldout": ("phmmer-queries.faa", "heldout.faa", {"defaults": ALL}),
}

# hmmscan runs: set name -> (hmm file, query sequence file, {case: [formats]}),
# written to golden/scan-runs.json. hmmscan needs a pressed model file: the hmm
# file is unpacked and hmmpress'ed into a temporary folder first.
SCAN_RUNS = {
    "scan_heldout": ("pfam-test.h3m.gz", "heldout.faa", {"defaults": ALL, "cut_ga": ALL, "evalue": ALL}),
}

# The footer line that names the directory a table was made in: kept as "." so that a golden
# names no machine's paths (the tests compare everything but the footer).
CURRENT_DIR = "# Current dir:"


def find_binary(name):
    """A HMMER binary (`hmmer_binaries.find_binary`), or exit."""
    path = hmmer_binaries.find_binary(name)
    if path is None:
        sys.exit(f"error: cannot find {name}")
    return path


def neutral_current_dir(path):
    with open(path) as fh:
        lines = fh.readlines()
    with open(path, "w") as fh:
        fh.writelines(f"{CURRENT_DIR}     .\n" if line.startswith(CURRENT_DIR) else line for line in lines)


def check_version(exe):
    out = subprocess.run([exe, "-h"], capture_output=True, text=True).stdout
    if "HMMER 3.4 " not in out:
        sys.exit(f"error: {exe} is not HMMER 3.4:\n{out[:300]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hmmsearch", default=None, help="path of the hmmsearch binary")
    ap.add_argument("--data", default=HERE, help="data folder (default: %(default)s)")
    args = ap.parse_args()

    exe = args.hmmsearch or find_binary("hmmsearch")
    check_version(exe)
    golden = os.path.join(args.data, "golden")
    os.makedirs(golden, exist_ok=True)

    with open(os.path.join(golden, "cases.json"), "w") as fh:
        json.dump(CASES, fh, indent=2)
        fh.write("\n")
    runs = {name: {"hmmfile": h, "seqfile": s, "cases": c} for name, (h, s, c) in RUNS.items()}
    with open(os.path.join(golden, "runs.json"), "w") as fh:
        json.dump(runs, fh, indent=2)
        fh.write("\n")

    phmmer = find_binary("phmmer")
    check_version(phmmer)
    with open(os.path.join(golden, "phmmer-runs.json"), "w") as fh:
        json.dump(
            {name: {"queryfile": q, "seqfile": s, "cases": c} for name, (q, s, c) in PHMMER_RUNS.items()}, fh, indent=2
        )
        fh.write("\n")

    hmmscan, hmmpress = find_binary("hmmscan"), find_binary("hmmpress")
    with open(os.path.join(golden, "scan-runs.json"), "w") as fh:
        json.dump(
            {name: {"hmmfile": h, "seqfile": q, "cases": c} for name, (h, q, c) in SCAN_RUNS.items()}, fh, indent=2
        )
        fh.write("\n")
    pressed = tempfile.mkdtemp(prefix="gpuhmm-goldens-")
    scan_runs = {}
    for name, (hmmfile, seqfile, cases) in SCAN_RUNS.items():
        unpacked = os.path.join(pressed, os.path.basename(hmmfile).removesuffix(".gz"))
        with gzip.open(os.path.join(args.data, hmmfile), "rb") as source, open(unpacked, "wb") as target:
            shutil.copyfileobj(source, target)
        subprocess.run([hmmpress, "-f", unpacked], check=True, capture_output=True)
        scan_runs[name] = (unpacked, seqfile, cases)

    jobs = [(exe, name, run) for name, run in RUNS.items()] + [(phmmer, name, run) for name, run in PHMMER_RUNS.items()]
    jobs += [(hmmscan, name, run) for name, run in scan_runs.items()]
    for binary, set_name, (queryfile, seqfile, cases) in jobs:
        for case, formats in cases.items():
            outs = {fmt: os.path.join("golden", f"{set_name}.{case}.{fmt}") for fmt in formats}
            cmd = [binary, "-o", os.devnull, "--cpu", "1"] + CASES[case]
            for fmt in formats:
                cmd += ["--" + fmt, outs[fmt]]
            cmd += [queryfile, seqfile]
            res = subprocess.run(cmd, cwd=args.data, capture_output=True, text=True)
            if res.returncode != 0:
                sys.exit(f"error: {' '.join(cmd)} failed ({res.returncode}):\n{res.stderr}")
            for fmt in formats:
                neutral_current_dir(os.path.join(args.data, outs[fmt]))
            print(
                f"{set_name}.{case}: "
                + " ".join(f"{f}={os.path.getsize(os.path.join(args.data, outs[f]))}" for f in formats)
            )


if __name__ == "__main__":
    main()
