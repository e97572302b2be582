"""Reading a large FASTA file of real proteins: gpuhmm's reader against Easel's, in one run.

Run from the repository root (no GPU needed):

    python benchmarks/reading.py --proteome benchmarks/data/proteome-HG003687.faa --residues 2.7e8

The database is `realdata.py`'s (the proteome, then copies of it with 15 % of each protein's
positions substituted, to `--residues`), written as FASTA with 60 residues a line, as UniProt's
files are. The file is read once untimed, so every timing reads it from the page cache: what is
measured is parsing and digitizing. gpuhmm reads it as a search does before it shards the
database (`db.fasta.read_sequence_file`), on every core of the host (`--threads` limits the
cores this process may use); Easel reads it through pyhmmer
(`SequenceFile.read_block`, one thread, as every HMMER program reads). Both give each sequence's
name, description and digital residues, compared record by record.

Writes benchmarks/results/reading-<host>.json (or --out): {"benchmark": "reading", "date",
"command", "host", "threads", "fasta_bytes", "sequences", "residues", "gpuhmm": {"seconds": [...],
"mb_per_s"}, "easel": {...}, "identical", "gpuhmm_over_easel"}.
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

import numpy as np
import pyhmmer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))
from gpuhmm.db.fasta import read_sequence_file  # noqa: E402
from gpuhmm.hits.text import sequence_text  # noqa: E402

from cpu_vs_pyhmmer import cpu_model  # noqa: E402
from endtoend import default_threads, host_tag  # noqa: E402
from realdata import mutated_database  # noqa: E402


def write_wrapped(path, residues, offsets, headers, width=60):
    """The sequences as FASTA, `width` residues a line."""
    symbols = np.frombuffer(pyhmmer.easel.Alphabet.amino().symbols.encode("ascii"), dtype=np.uint8)
    text = symbols[residues].tobytes()
    with open(path, "wb") as handle:
        for header, start, stop in zip(headers, offsets[:-1].tolist(), offsets[1:].tolist()):
            lines = [text[at : min(at + width, stop)] for at in range(start, stop, width)]
            handle.write(b">" + header.encode() + b"\n" + b"".join(line + b"\n" for line in lines))


def best_of(repeats, read):
    seconds, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = read()
        seconds.append(round(time.perf_counter() - started, 3))
    return seconds, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proteome", type=Path, required=True)
    parser.add_argument("--residues", type=float, default=2.7e8)
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.threads])
    residues, offsets, headers, _ = mutated_database(args.proteome, int(args.residues), 0.15, args.seed)
    alphabet = pyhmmer.easel.Alphabet.amino()
    with tempfile.TemporaryDirectory(prefix="gpuhmm-reading-") as work:
        fasta = Path(work) / "db.faa"
        write_wrapped(fasta, residues, offsets, headers)
        size = fasta.stat().st_size
        read_sequence_file(fasta, "amino")  # into the page cache

        def easel():
            with pyhmmer.easel.SequenceFile(str(fasta), digital=True, alphabet=alphabet) as handle:
                return handle.read_block()

        ours_s, (parsed, _) = best_of(args.repeats, lambda: read_sequence_file(fasta, "amino"))
        easel_s, block = best_of(args.repeats, easel)
    identical = len(block) == len(parsed.names) and all(
        sequence_text(s)[::2] == (name, description) and bytes(s.sequence) == parsed.codes[a:b]
        for s, name, description, a, b in zip(
            block, parsed.names, parsed.descriptions, parsed.starts.tolist(), parsed.ends.tolist()
        )
    )
    result = {
        "benchmark": "reading",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *sys.argv]),
        "host": {"cpu_model": cpu_model(), "cpu_count": os.cpu_count()},
        "threads": args.threads,
        "fasta_bytes": size,
        "sequences": len(parsed.names),
        "residues": int(parsed.lengths.sum()),
        "gpuhmm": {"seconds": ours_s, "mb_per_s": round(size / min(ours_s) / 1e6, 1)},
        "easel": {"seconds": easel_s, "mb_per_s": round(size / min(easel_s) / 1e6, 1)},
        "identical": identical,
        "gpuhmm_over_easel": round(min(easel_s) / min(ours_s), 2),
    }
    out = args.out or HERE / "results" / f"reading-{host_tag()}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
