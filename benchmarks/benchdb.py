"""Reproducible benchmark databases: the real proteome, `hmmemit` samples, background sequences.

A database of `residues` residues is made of (1) the real proteome (a FASTA file) once, (2) about
10% of sequences emitted by HMMER's own `hmmemit` from the benchmark's Pfam models (true
homologs, so the filters see real hits), and (3) the rest i.i.d. background sequences drawn
from HMMER's null-model residue frequencies, with lengths drawn from the proteome's. Everything
follows from `seed`.

`make_database(..., at_least=True, fast=True)` is the end-to-end benchmark's variant: the
background lengths are drawn until the total reaches `residues` (never short of it), and the
background residues come from a 2^20-entry lookup table (each frequency rounded to a multiple
of 2^-20) instead of `Generator.choice`, about 5x faster at 100M residues. `write_fasta` writes
a database (or a subset of it) as FASTA in one join.
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
        subprocess.run(["hmmemit", "-N", str(count), "--seed", str(seed), "-o", str(out), str(models_path)], check=True)
        return read_digital(out, alphabet)


def background_residues(rng, frequencies, count, lookup_bits=20, chunk=1 << 24):
    """`count` i.i.d. residues (uint8 codes) drawn from `frequencies` through a lookup table of
    2**lookup_bits entries: vectorised, each probability off by less than 2**-lookup_bits."""
    size = 1 << lookup_bits
    edges = np.rint(np.cumsum(frequencies) * size).astype(np.int64)
    edges[-1] = size
    table = np.repeat(np.arange(len(frequencies), dtype=np.uint8), np.diff(edges, prepend=0))
    out = np.empty(count, dtype=np.uint8)
    for start in range(0, count, chunk):
        stop = min(count, start + chunk)
        out[start:stop] = table[rng.integers(0, size, size=stop - start, dtype=np.uint32)]
    return out


#: `hmmemit` samples of every model in a database (`make_database`).
EMIT_PER_MODEL = 2


def make_database(
    residues, proteome_path, models_path, seed=20261121, emit_per_model=EMIT_PER_MODEL, *, at_least=False, fast=False
):
    """Returns (digital residues end to end as uint8, offsets int64, names): the proteome's
    sequences, then `emit_per_model` samples of each model, then the background.

    By default (as the kernel benchmark uses it) the total may fall short of `residues` by
    part of a sequence. `at_least=True` draws background lengths until the total reaches
    `residues`; `fast=True` draws background residues with `background_residues`.
    """
    alphabet = pyhmmer.easel.Alphabet.amino()
    rng = np.random.default_rng(seed)
    pieces = [np.asarray(s.sequence, dtype=np.uint8) for s in read_digital(proteome_path, alphabet)]
    pieces += [np.asarray(s.sequence, dtype=np.uint8) for s in emitted(models_path, emit_per_model, seed, alphabet)]
    proteome_lengths = np.array([len(p) for p in pieces[:2100] if len(p)], dtype=np.int64)
    frequencies = np.asarray(pyhmmer.plan7.Background(alphabet).residue_frequencies, dtype=np.float64)
    frequencies /= frequencies.sum()
    have = sum(len(p) for p in pieces)
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    if have < residues:
        missing = residues - have
        tail = rng.choice(proteome_lengths, size=int(missing / proteome_lengths.mean()) + 16)
        if at_least:
            while tail.sum() < missing:
                tail = np.concatenate([tail, rng.choice(proteome_lengths, size=1024)])
            tail = tail[: int(np.searchsorted(np.cumsum(tail), missing)) + 1]
        else:
            tail = tail[np.cumsum(tail) <= missing]
        if fast:
            background = background_residues(rng, frequencies, int(tail.sum()))
        else:
            background = rng.choice(len(frequencies), size=int(tail.sum()), p=frequencies).astype(np.uint8)
        pieces.append(background)
        lengths = np.concatenate([lengths, tail])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    names = [f"bench{index}" for index in range(len(lengths))]
    return np.concatenate(pieces), offsets, names


def homolog_count(proteome_path, models, emit_per_model=EMIT_PER_MODEL):
    """How many sequences open a `make_database` database before its background: the proteome's
    and the `hmmemit` samples of `models` models."""
    return len(read_digital(proteome_path, pyhmmer.easel.Alphabet.amino())) + emit_per_model * models


def write_fasta(path, residues, offsets, names, indices=None, alphabet=None):
    """Write sequences `indices` (default: all, in order) as FASTA, one line per sequence,
    decoding the digital residues with one table lookup and writing with one join.
    Returns (sequences, residues) written."""
    alphabet = alphabet or pyhmmer.easel.Alphabet.amino()
    symbols = np.frombuffer(alphabet.symbols.encode("ascii"), dtype=np.uint8)
    indices = range(len(names)) if indices is None else [int(i) for i in indices]
    starts, stops = offsets[:-1].tolist(), offsets[1:].tolist()
    text = memoryview(symbols[residues].tobytes())
    parts = []
    for i in indices:
        parts += (b">", names[i].encode(), b"\n", text[starts[i] : stops[i]], b"\n")
    with open(path, "wb") as handle:
        handle.write(b"".join(parts))
    return len(indices), sum(stops[i] - starts[i] for i in indices)
