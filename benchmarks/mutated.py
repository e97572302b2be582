"""Mutated copies of a real proteome (the database of realdata.py, stream.py and the others):
the proteome's distinct proteins once as they are, then copies of it in which every protein
has round(rate x its positions that are not '*') positions, uniform without replacement,
substituted with residues drawn from HMMER's null-model frequencies over the 20 standard amino
acids, redrawn while equal to the residue replaced; lengths, descriptions and '*' kept; copy k
renames S to S.m<k>.

`Proteome.copy` makes one copy from a generator. `realdata.mutated_database` draws every copy
from one generator, in memory; `write_fasta` draws copy k from its own generator (seeded with
(seed, k)) on every core and writes the copies in order, so that a file of any size is written
in bounded memory.
"""

from __future__ import annotations

import math
import multiprocessing
import os

import numpy as np
import pyhmmer

from benchdb import background_residues, read_digital


def text(value):
    """pyhmmer gives names as str (0.11+) or bytes (older)."""
    return value.decode() if isinstance(value, bytes) else (value or "")


class Proteome:
    """A proteome's distinct proteins (the first of each residue string) and what a copy's
    substitutions are drawn from."""

    def __init__(self, path):
        self.alphabet = pyhmmer.easel.Alphabet.amino()
        stop_code = self.alphabet.symbols.index("*")
        seen, kept, self.left_out = set(), [], []
        for sequence in read_digital(path, self.alphabet):
            key = bytes(sequence.sequence)
            if key in seen:  # a proteome may hold the same protein twice (paralogs, duplicated genes)
                self.left_out.append(text(sequence.name))
                continue
            seen.add(key)
            kept.append(sequence)
        self.names = [text(s.name) for s in kept]
        self.descriptions = [text(s.description) for s in kept]
        self.base = np.concatenate([np.asarray(s.sequence, dtype=np.uint8) for s in kept])
        self.lengths = np.array([len(s.sequence) for s in kept], dtype=np.int64)
        self.mutable = np.flatnonzero(self.base != stop_code)
        # per protein: its mutable positions' first index in `mutable` and how many to substitute
        self.owner = np.repeat(np.arange(len(kept)), self.lengths)[self.mutable]
        first_mutable = np.searchsorted(self.owner, np.arange(len(kept)))
        self.rank = np.arange(len(self.mutable)) - first_mutable[self.owner]
        self.frequencies = np.asarray(pyhmmer.plan7.Background(self.alphabet).residue_frequencies, dtype=np.float64)
        self.frequencies /= self.frequencies.sum()

    def substitutions(self, rate):
        """Positions substituted per protein at `rate`."""
        return np.rint(rate * np.bincount(self.owner, minlength=len(self.lengths))).astype(np.int64)

    def copy(self, per_protein, rng, out):
        """One mutated copy into `out` (as long as the proteome), `per_protein` positions each."""
        # sorting protein index + U(0, 0.5) shuffles the mutable positions within each protein (the
        # half keeps a sum from rounding up to the next index); the first per_protein[i] of protein
        # i's positions are then a uniform draw without replacement
        order = np.argsort(self.owner + 0.5 * rng.random(len(self.mutable)))
        positions = self.mutable[order[self.rank < per_protein[self.owner]]]
        original = self.base[positions]
        replacement = background_residues(rng, self.frequencies, int(per_protein.sum()))
        same = np.flatnonzero(replacement == original)
        while len(same):  # a substitution must change the residue
            replacement[same] = background_residues(rng, self.frequencies, len(same))
            same = same[replacement[same] == original[same]]
        out[:] = self.base
        out[positions] = replacement

    def copies_for(self, target_residues):
        """Mutated copies after the proteome itself that reach `target_residues`."""
        return max(0, math.ceil((target_residues - len(self.base)) / len(self.base)))

    def headers(self, copy, copies):
        """The FASTA headers of copy `copy` (0: the proteome itself) of `copies`."""
        suffix = f".m{copy:0{max(3, len(str(copies)))}d}" if copy else ""
        pairs = zip(self.names, self.descriptions, strict=True)
        return [f"{n}{suffix} {d}" if d else f"{n}{suffix}" for n, d in pairs]


_SHARED = {}


def _copy_text(copy):
    """FASTA text of copy `copy`, one line a sequence, in a worker of `write_fasta`'s pool."""
    proteome, per_protein, seed, copies = (_SHARED[key] for key in ("proteome", "per_protein", "seed", "copies"))
    residues = np.empty(len(proteome.base), np.uint8)
    if copy:
        proteome.copy(per_protein, np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, copy]))), residues)
    else:
        residues[:] = proteome.base
    symbols = np.frombuffer(proteome.alphabet.symbols.encode("ascii"), np.uint8)
    body = memoryview(symbols[residues].tobytes())
    bounds = np.concatenate([[0], np.cumsum(proteome.lengths)]).tolist()
    parts = []
    for header, start, stop in zip(proteome.headers(copy, copies), bounds, bounds[1:], strict=False):
        parts += (b">", header.encode(), b"\n", body[start:stop], b"\n")
    return b"".join(parts)


def write_fasta(proteome_path, target_residues, rate, seed, path, workers=None):
    """Write the proteome and its mutated copies up to `target_residues` residues to `path` as
    FASTA, copy k's generator PCG64(SeedSequence([seed, k])), on `workers` processes (default:
    every core). Returns what was written, as realdata.mutated_database's info says it."""
    proteome = Proteome(proteome_path)
    copies, per_protein = proteome.copies_for(target_residues), proteome.substitutions(rate)
    _SHARED.update(proteome=proteome, per_protein=per_protein, seed=seed, copies=copies)
    workers = workers or len(os.sched_getaffinity(0))
    with open(path, "wb") as handle, multiprocessing.get_context("fork").Pool(workers) as pool:
        for text_ in pool.imap(_copy_text, range(copies + 1), chunksize=4):
            handle.write(text_)
    _SHARED.clear()
    return {
        "sequences": len(proteome.lengths) * (copies + 1),
        "residues": len(proteome.base) * (copies + 1),
        "copies": copies,
        "mutation_rate": rate,
        "seed": seed,
        "rng": "copy k: numpy.random.Generator(PCG64(SeedSequence([seed, k])))",
    }
