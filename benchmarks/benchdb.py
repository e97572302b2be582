"""Reproducible benchmark databases: the real proteome, `hmmemit` samples, background sequences.

A database of `residues` residues is made of (1) the proteome in ../shared/data once, (2) about
10% of sequences emitted by HMMER's own `hmmemit` from the benchmark's Pfam models (true
homologs, so the filters see real hits), and (3) the rest i.i.d. background sequences drawn
from HMMER's null-model residue frequencies, with lengths drawn from the proteome's. Everything
follows from `seed`.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pyhmmer


def read_digital(path, alphabet):
    with pyhmmer.easel.SequenceFile(str(path), digital=True, alphabet=alphabet) as handle:
        return list(handle.read_block())


def emitted(models_path, count, seed, alphabet):
    """`hmmemit -N count` over every model in `models_path` (the real binary)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "emitted.faa"
        subprocess.run(["hmmemit", "-N", str(count), "--seed", str(seed), "-o", str(out), str(models_path)],
                       check=True)
        return read_digital(out, alphabet)


def make_database(residues, proteome_path, models_path, seed=20261121, emit_per_model=2):
    """Returns (digital residues end to end as uint8, offsets int64, names)."""
    alphabet = pyhmmer.easel.Alphabet.amino()
    rng = np.random.default_rng(seed)
    pieces = [np.asarray(s.sequence, dtype=np.uint8) for s in read_digital(proteome_path, alphabet)]
    pieces += [np.asarray(s.sequence, dtype=np.uint8) for s in emitted(models_path, emit_per_model, seed, alphabet)]
    proteome_lengths = np.array([len(p) for p in pieces[:2100] if len(p)], dtype=np.int64)
    frequencies = np.asarray(pyhmmer.plan7.Background(alphabet).residue_frequencies, dtype=np.float64)
    frequencies /= frequencies.sum()
    have = sum(len(p) for p in pieces)
    if have < residues:
        lengths = rng.choice(proteome_lengths, size=int((residues - have) / proteome_lengths.mean()) + 16)
        lengths = lengths[np.cumsum(lengths) <= residues - have]
        background = rng.choice(len(frequencies), size=int(lengths.sum()), p=frequencies).astype(np.uint8)
        pieces += np.split(background, np.cumsum(lengths)[:-1])
    offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(np.int64)
    names = [f"bench{index}" for index in range(len(pieces))]
    return np.concatenate(pieces), offsets, names
