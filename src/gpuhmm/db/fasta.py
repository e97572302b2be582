"""Sequence files read as Easel reads them: a parallel reader for plain FASTA, Easel itself for the rest.

Residues are Easel's digital codes exactly as `hmmsearch` reads them, so lowercase, degenerate
residues and a trailing `*` mean what they mean to HMMER. FASTA in its plain form (most files)
is read by an equivalent of Easel's FASTA reader (plainfasta.c, or numpy) on every core, tested
against it; any other FASTA, and every other format Easel reads (EMBL, UniProt, GenBank, the
alignment formats, whose sequences it reads one by one without their gaps), by Easel itself,
through pyhmmer. The format is the one asserted (`--tformat`, `--qformat`), else the one Easel
detects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import operator
import zlib
from pathlib import Path

import numpy as np
import pyhmmer.easel

from ..errors import GpuhmmError
from ..hits.text import sequence_text, shown
from . import plainfasta
from .format import SequenceShard
from .inputs import InputFile

#: p7_Pipeline() refuses longer targets ("Target sequence length > 100K, over comparison
#: pipeline limit"); hmmsearch then stops with no tables. makedb stops the same way, earlier.
MAX_TARGET_LENGTH = 100_000


ALPHABETS = {
    "amino": pyhmmer.easel.Alphabet.amino,
    "dna": pyhmmer.easel.Alphabet.dna,
    "rna": pyhmmer.easel.Alphabet.rna,
}

#: Formats Easel names but HMMER's searches cannot read here: why, for the one-line error.
_UNREADABLE = {
    "ncbi": "gpuhmm does not read NCBI BLAST databases; give the sequences as FASTA",
    "fmindex": "HMMER's searches read no sequences from an FM-index (fmindex format)",
}

#: Easel's guess from a file name, before it looks at the text (`sqascii_GuessFileFormat`).
_NAMED_FORMATS = {".fa": "fasta", ".gb": "genbank"}


def alphabet_name(alphabet):
    for name, make in ALPHABETS.items():
        if alphabet == make():
            return name
    raise ValueError(f"unsupported alphabet {alphabet!r}")


def read_sequences(path, alphabet, format=None):
    """Every sequence of `path` in file order, as pyhmmer `DigitalSequence`s in `alphabet`
    ("amino", "dna" or "rna"), never guessed: phmmer reads its queries as protein, even a first
    record of A, C, G and T only. `format`: Easel's name of the asserted format, or None."""
    parsed, easel_alphabet = read_sequence_file(path, alphabet, format)
    everything = np.arange(len(parsed.names))
    return list(parsed.shard(everything).to_block(easel_alphabet, everything))


def guess_alphabet(path, format=None):
    """Easel's guess of the alphabet name of a sequence file, or None when it cannot tell."""
    with contextlib.ExitStack() as stack:
        try:
            handle, _ = open_easel(path, None, easel_format(path, format), stack)
        except _UndeterminedAlphabet:
            return None
        return alphabet_name(handle.alphabet)


class _UndeterminedAlphabet(GpuhmmError):
    pass


def easel_format(path, format):
    """The format Easel is told to read: the asserted one, else the one Easel takes from a name
    ending in `.fa` or `.gb` before it looks at the text, else None, for Easel to detect."""
    named = [named for suffix, named in _NAMED_FORMATS.items() if str(path).endswith(suffix)]
    return format or (named[0] if named else None)


def open_easel(path, alphabet, format, stack):
    """An Easel reader of `format` (None: detected) on `path`, and the `InputFile` under it."""
    path = Path(path)
    if not path.exists():
        raise GpuhmmError(path, "sequence file not found")
    if path.is_dir():
        raise GpuhmmError(path, "is a directory, not a sequence file or a gpuhmm database")
    if format in _UNREADABLE:
        raise GpuhmmError(path, _UNREADABLE[format])
    try:
        source = InputFile(path, stack)
    except OSError as error:
        raise GpuhmmError(path, f"cannot read sequence file ({error.strerror or error})") from None
    if format is None and not isinstance(source.source, Path):  # a stream, which Easel reads once
        format = _first_line_format(path, source.compressed)
    with easel_errors(path, source, format):
        handle = pyhmmer.easel.SequenceFile(source.source, format, digital=True, alphabet=alphabet)
    return stack.enter_context(handle), source


@contextlib.contextmanager
def easel_errors(path, source, format):
    """pyhmmer's and gzip's reading errors, as one-line errors naming the file and the format
    it was read in (None: not yet detected).

    A damaged gzip stream is the first cause of whatever else went wrong after it.
    """
    try:
        yield
    except (EOFError, ValueError, SystemError, OSError, GpuhmmError) as error:
        source.check_stream(path)
        if isinstance(error, GpuhmmError):
            raise
        if isinstance(error, EOFError) or (format is None and _is_blank(path)):
            raise GpuhmmError(path, "sequence file is empty") from None
        if "Could not determine alphabet" in str(error):
            raise _UndeterminedAlphabet(
                path, "cannot tell whether the sequences are protein or nucleotide; pass --alphabet"
            ) from None
        if "Could not determine format" in str(error):
            raise GpuhmmError(path, f"format not recognized ({_DETECTED})") from None
        if isinstance(error, OSError):
            raise GpuhmmError(path, f"cannot read sequence file ({error.strerror or error})") from None
        raise GpuhmmError(path, f"not a readable {format or 'sequence'} file ({_easel_problem(error)})") from None
    source.check_stream(path)


#: What Easel detects, for the error where it cannot.
_DETECTED = "Easel detects FASTA, EMBL, UniProt, GenBank and alignments"


def _first_line_format(path, compressed):
    """Easel's format of a file it reads as a stream (compressed, or named `.gz`), from its
    first line that is not blank, as Easel detects it (`sqascii_GuessFileFormat`). Easel
    cannot read a stream again to detect an alignment's format: that must be asserted."""
    try:
        with (gzip.open if compressed else open)(path, "rb") as handle:
            line = next((line for line in handle if line.strip()), None)
    except (OSError, EOFError, zlib.error) as error:
        raise GpuhmmError(path, f"truncated or damaged gzip file ({error})") from None
    if line is None:
        raise GpuhmmError(path, "sequence file is empty")
    if line.startswith(b">"):
        return "fasta"
    if line.startswith(b"ID   "):
        return "embl"
    if line.startswith(b"LOCUS   ") or b"Genetic Sequence Data Bank" in line:
        return "genbank"
    raise GpuhmmError(path, f"format not recognized ({_DETECTED}; in a compressed file, assert an alignment's)")


def _is_blank(path):
    """Whether a file Easel reads by its name is empty or only whitespace."""
    with open(path, "rb") as handle:
        return not any(block.strip() for block in iter(lambda: handle.read(1 << 16), b""))


@dataclasses.dataclass(frozen=True)
class Parsed:
    """A sequence file's sequences in file order, as columns. Sequence i is the digital codes
    codes[starts[i]:ends[i]]; `codes` may hold other bytes between sequences."""

    names: list
    descriptions: list
    codes: bytes | memoryview
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64
    accessions: list | None = None  # None where no sequence has one (FASTA never has)
    first: int = 0  # the file position (0-based) of the first sequence: a piece's, past 0

    @functools.cached_property
    def lengths(self):
        return self.ends - self.starts

    def shard(self, members):
        """The sequences at indices `members` (file positions), in that order, as a shard."""
        order = members.tolist()
        offsets = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(self.lengths[members], out=offsets[1:])
        return SequenceShard(
            residues=plainfasta.gathered(self.codes, self.starts, self.ends, members),
            offsets=offsets,
            names=_picked(self.names, order),
            descriptions=_picked(self.descriptions, order),
            source_index=members.astype(np.int64) + self.first,
            accessions=None if self.accessions is None else _picked(self.accessions, order),
        )


def _picked(items, order):
    """[items[i] for i in order], the loop in C (operator.itemgetter)."""
    return list(operator.itemgetter(*order)(items)) if len(order) > 1 else [items[i] for i in order]


def read_sequence_file(path, alphabet_name_or_none, format=None):
    """The sequences of `path` as `Parsed` columns, and the Easel alphabet they are in (the one
    named, else Easel's guess); `format` is Easel's name of the asserted format, or None."""
    format = easel_format(path, format)
    name = alphabet_name_or_none or guess_alphabet(path, format)
    alphabet = ALPHABETS[name]() if name else None
    plain = alphabet is not None and format in (None, "fasta")
    columns = plainfasta.read(Path(path), alphabet) if plain else None
    parsed = Parsed(*columns) if columns else None
    if parsed is None:
        parsed, alphabet = _read_with_easel(path, alphabet, format)
    if not parsed.names:
        raise GpuhmmError(path, "sequence file holds no sequences")
    check_lengths(path, parsed.lengths, parsed.names.__getitem__)
    return parsed, alphabet


class NotPlain(Exception):
    """A file read in pieces (`read_pieces`) that is not plain FASTA, which Easel reads whole."""


def read_pieces(path, alphabet_name, piece_bytes):
    """`read_sequence_file`'s columns of the plain FASTA file `path`, in the alphabet named, piece
    by piece (`plainfasta.read_pieces`), each with the file position of its first sequence; a
    piece may hold none. Raises NotPlain where a piece, or the whole, is not plain FASTA or holds
    no sequence; the pieces before it are read as Easel reads them."""
    first = 0
    for columns in plainfasta.read_pieces(Path(path), ALPHABETS[alphabet_name](), piece_bytes):
        if columns is None:
            raise NotPlain(path)
        parsed = Parsed(*columns, first=first)
        del columns
        check_lengths(path, parsed.lengths, parsed.names.__getitem__)
        first += len(parsed.names)
        yield parsed
        del parsed  # a piece taken is the caller's to free while the next is read
    if not first:
        raise NotPlain(path)


def check_lengths(path, lengths, name):
    """Fails on the longest of `lengths` (a numpy array) if it passes what HMMER's pipeline takes;
    `name(i)` is sequence i's name."""
    if len(lengths) and lengths.max() > MAX_TARGET_LENGTH:
        longest = int(np.argmax(lengths))
        raise GpuhmmError(
            path,
            f"sequence {shown(name(longest))!r} has {int(lengths[longest]):,} residues; "
            f"HMMER's comparison pipeline stops at {MAX_TARGET_LENGTH:,} (hmmsearch fails with "
            f"'Target sequence length > 100K'); use nhmmer for long nucleotide targets",
        )


def _read_with_easel(path, alphabet, format):
    names, accessions, descriptions, residues = [], [], [], []
    with contextlib.ExitStack() as stack:
        handle, source = open_easel(path, alphabet, format, stack)
        alphabet = handle.alphabet
        with easel_errors(path, source, format or handle.format):
            for sequence in handle:
                # A copy, so that each Easel sequence is freed as soon as it is read.
                residues.append(bytes(sequence.sequence))
                name, accession, description = sequence_text(sequence)
                names.append(name)
                accessions.append(accession)
                descriptions.append(description)
    lengths = np.fromiter(map(len, residues), dtype=np.int64, count=len(residues))
    ends = np.cumsum(lengths)
    accessions = accessions if any(accessions) else None  # as FASTA's: none
    return Parsed(names, descriptions, b"".join(residues), ends - lengths, ends, accessions), alphabet


def _easel_problem(error):
    return str(error).removeprefix("Could not parse file: ").strip()
