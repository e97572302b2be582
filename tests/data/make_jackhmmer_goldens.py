#!/usr/bin/env python3
"""Run the real HMMER 3.4 `jackhmmer` to produce golden outputs of `gpuhmm jackhmmer`.

Writes the query files (real proteins of heldout.faa, picked by name, in heldout.faa's order,
as Easel writes them), then for every case of CASES runs, from inside this directory (so the
names in the outputs are relative),

    jackhmmer --cpu 1 <case options...> [-o golden/jackhmmer.<case>.out] [-A golden/jackhmmer.<case>.sto]
              --tblout golden/jackhmmer.<case>.tblout --domtblout golden/jackhmmer.<case>.domtblout
              [--chkhmm golden/jackhmmer.<case>.chk --chkali golden/jackhmmer.<case>.chk]
              <query file> proteins.faa

(each case stores the outputs it lists, to keep golden/ small) and golden/jackhmmer-runs.json
(case → its options, query file, outputs and checkpoint rounds). What
varies from run to run is left out of the stored files: the report's "# CPU time" and
"# Mc/sec" lines, the checkpoint models' DATE lines; the tables' footers name the current
directory "." and the program "jackhmmer" without its path.

Requires the HMMER 3.4 `jackhmmer` binary (PATH or the PyPI `hmmer` package's data/bin folder).
"""

import json
import os
import subprocess
import sys

import pyhmmer

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from helpers import binaries as hmmer_binaries  # noqa: E402  (tests/helpers/binaries.py)

HERE = os.path.dirname(os.path.abspath(__file__))

#: Query file → the heldout.faa sequences it holds. The real proteins iterate against
#: proteins.faa in every way jackhmmer reports: one converges in 3 rounds, marking a target it
#: drops; one in 2; one still grows after 3. The short emitted samples (one converges in 3
#: rounds, one still grows) keep the checkpoint models small.
QUERIES = {
    "jackhmmer-queries.faa": (
        "938293.PRJEB85.HG003690_20",
        "938293.PRJEB85.HG003686_31",
        "938293.PRJEB85.HG003686_309",
    ),
    "jackhmmer-short.faa": ("heldemit_PTS_EIIB_1", "heldemit_Fer4_1"),
}

ALPHAFOLD3 = ["--noali", "--F1", "5e-4", "--F2", "5e-5", "--F3", "5e-7", "-N", "1", "-E", "1e-4", "--incE", "1e-4"]

TABLES = ("tblout", "domtblout")

#: case → (jackhmmer options, query file, outputs stored, checkpoint rounds written: 0 for none).
CASES = {
    "N3": (["-N", "3", "--noali"], "jackhmmer-queries.faa", ("out", *TABLES), 0),
    "alphafold3": (ALPHAFOLD3, "jackhmmer-queries.faa", ("out", "sto", *TABLES), 0),
    "alphafold3_Z": (ALPHAFOLD3 + ["-Z", "1000000", "--domZ", "1000000"], "jackhmmer-queries.faa", TABLES, 0),
    "checkpoints": (["-N", "3"], "jackhmmer-short.faa", ("out", "sto", *TABLES), 3),
}

#: Each stored output's option.
FLAGS = {"out": "-o", "sto": "-A", "tblout": "--tblout", "domtblout": "--domtblout"}

TARGETS = "proteins.faa"


def write_queries():
    alphabet = pyhmmer.easel.Alphabet.amino()
    with pyhmmer.easel.SequenceFile(os.path.join(HERE, "heldout.faa"), digital=True, alphabet=alphabet) as handle:
        heldout = list(handle)
    for path, names in QUERIES.items():
        with open(os.path.join(HERE, path), "wb") as handle:
            for sequence in heldout:
                if sequence.name in names:
                    sequence.write(handle)


def without(path, prefixes):
    with open(path, "rb") as handle:
        lines = handle.readlines()
    with open(path, "wb") as handle:
        handle.writelines(line for line in lines if not line.startswith(prefixes))


def neutral_footer(path, binary):
    with open(path) as handle:
        lines = handle.readlines()
    with open(path, "w") as handle:
        for line in lines:
            if line.startswith("# Current dir:"):
                line = "# Current dir:     .\n"
            elif line.startswith("# Option settings:"):
                line = line.replace(binary, "jackhmmer", 1)
            handle.write(line)


def main():
    binary = hmmer_binaries.find_binary("jackhmmer")
    if binary is None:
        sys.exit("error: cannot find jackhmmer")
    if "HMMER 3.4 " not in subprocess.run([binary, "-h"], capture_output=True, text=True).stdout:
        sys.exit(f"error: {binary} is not HMMER 3.4")
    write_queries()
    runs = {}
    for case, (options, queries, stored, checkpoints) in CASES.items():
        stem = os.path.join("golden", f"jackhmmer.{case}")
        outputs = [word for kind in stored for word in (FLAGS[kind], f"{stem}.{kind}")]
        if checkpoints:
            outputs += ["--chkhmm", f"{stem}.chk", "--chkali", f"{stem}.chk"]
        command = [binary, "--cpu", "1", *options, *outputs, queries, TARGETS]
        done = subprocess.run(command, cwd=HERE, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"error: {' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        if "out" in stored:
            without(os.path.join(HERE, f"{stem}.out"), (b"# CPU time:", b"# Mc/sec:"))
        for table in TABLES:
            neutral_footer(os.path.join(HERE, f"{stem}.{table}"), binary)
        names = [f"{stem}.{kind}" for kind in stored]
        for number in range(1, checkpoints + 1):
            without(os.path.join(HERE, f"{stem}.chk-{number}.hmm"), (b"DATE ",))
            names += [f"{stem}.chk-{number}.hmm", f"{stem}.chk-{number}.sto"]
        runs[case] = {
            "options": options,
            "queryfile": queries,
            "seqfile": TARGETS,
            "outputs": list(stored),
            "checkpoints": checkpoints,
        }
        print(case, " ".join(f"{name}={os.path.getsize(os.path.join(HERE, name))}" for name in names))
    with open(os.path.join(HERE, "golden", "jackhmmer-runs.json"), "w") as handle:
        json.dump(runs, handle, indent=2)
        handle.write("\n")


if __name__ == "__main__":
    main()
