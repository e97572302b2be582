"""Parity on inputs made fresh at test time, never seen while gpuhmm was written.

Models are a random subset of the test models; targets are random background proteins with
hmmemit samples, random name lengths (the tables' column widths depend on them), duplicate
names, lowercase, degenerate residues and stop codons. The reference is the hmmer 3.4
wheel's own hmmsearch, run here. Set GPUHMM_FRESH_SEED to draw another set.
"""

from __future__ import annotations

import os
import random
import string
import subprocess

import pyhmmer
import pytest

from gpuhmm.cli import main

from helpers.data import DATA, TABLES, assert_tables_equal, hmmer_binary

SEED = int(os.environ.get("GPUHMM_FRESH_SEED", "20261121"))
BACKGROUND = "ACDEFGHIKLMNPQRSTVWY"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    generator = random.Random(SEED)
    folder = tmp_path_factory.mktemp("fresh")
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        models = list(handle)
    chosen = sorted(generator.sample(range(len(models)), 8))
    with open(folder / "models.hmm", "wb") as handle:
        for index in chosen:
            models[index].write(handle)
    emitted = subprocess.run(
        [hmmer_binary("hmmemit"), "-N", "4", "--seed", str(SEED % 100000 + 1), folder / "models.hmm"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    samples = [block.split("\n", 1)[1].replace("\n", "") for block in emitted.split(">")[1:]]
    records = []
    for sequence in samples + [
        "".join(generator.choices(BACKGROUND, k=generator.randint(1, 1500))) for _ in range(120)
    ]:
        if generator.random() < 0.3:  # hits embedded in background
            flank = "".join(generator.choices(BACKGROUND, k=generator.randint(0, 400)))
            sequence = flank + sequence + flank[::-1]
        if generator.random() < 0.1:
            sequence = sequence.lower()
        if generator.random() < 0.1:
            position = generator.randrange(len(sequence))
            sequence = sequence[:position] + generator.choice("XBZUOJ") + sequence[position + 1 :]
        if generator.random() < 0.3:
            sequence += "*"
        name = "".join(generator.choices(string.ascii_letters + string.digits + "_|.", k=generator.randint(3, 45)))
        records.append((name, sequence))
    records += [(records[0][0], records[1][1]), ("giant", "".join(generator.choices(BACKGROUND, k=35000)) + samples[0])]
    generator.shuffle(records)
    with open(folder / "targets.faa", "w") as handle:
        for name, sequence in records:
            width = generator.choice([60, 80, 37, 10**6])
            body = "\n".join(sequence[i : i + width] for i in range(0, len(sequence), width))
            handle.write(f">{name} random description {generator.random():.3f}\n{body}\n")
    return folder


@pytest.mark.parametrize(
    "options",
    [[], ["-E", "1e-3", "--domE", "1e-2"], ["--cut_ga"], ["-T", "15"], ["--max"]],
    ids=["defaults", "evalue", "cut_ga", "bitscore", "max"],
)
def test_fresh_inputs_identical_to_hmmsearch(fresh, tmp_path, options):
    reference = {kind: tmp_path / f"hmmsearch.{kind}" for kind in TABLES}
    subprocess.run(
        [
            hmmer_binary("hmmsearch"),
            "--cpu",
            "1",
            "-o",
            os.devnull,
            *[word for kind, path in reference.items() for word in (f"--{kind}", path)],
            *options,
            fresh / "models.hmm",
            fresh / "targets.faa",
        ],
        check=True,
    )
    produced = {kind: tmp_path / f"gpuhmm.{kind}" for kind in TABLES}
    assert (
        main(
            [
                "search",
                "--cpu",
                "2",
                "--db-shards",
                "3",
                "--model-shards",
                "2",
                *[word for kind, path in produced.items() for word in (f"--{kind}", str(path))],
                *options,
                str(fresh / "models.hmm"),
                str(fresh / "targets.faa"),
            ]
        )
        == 0
    )
    for kind in TABLES:
        assert_tables_equal(produced[kind], reference[kind])
