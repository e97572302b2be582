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

import collections
import contextlib
import ctypes
import dataclasses
import functools
import gzip
import os
import re
import stat
import string
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyhmmer.easel

from .._host import available_cpus
from ..engine import hostc
from ..errors import GpuhmmError
from ..hits.text import sequence_text, shown
from .format import SequenceShard
from .inputs import GZIP_MAGIC, InputFile

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
class _Parsed:
    """A sequence file's sequences in file order, as columns. Sequence i is the digital codes
    codes[starts[i]:ends[i]]; `codes` may hold other bytes between sequences."""

    names: list
    descriptions: list
    codes: bytes
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64
    accessions: list | None = None  # None where no sequence has one (FASTA never has)

    @functools.cached_property
    def lengths(self):
        return self.ends - self.starts

    def shard(self, members):
        """The sequences at indices `members` (file positions), in that order, as a shard."""
        order = members.tolist()
        offsets = np.zeros(len(order) + 1, dtype=np.int64)
        np.cumsum(self.lengths[members], out=offsets[1:])
        codes = memoryview(self.codes)
        spans = zip(self.starts[members].tolist(), self.ends[members].tolist())
        return SequenceShard(
            residues=np.frombuffer(b"".join([codes[start:end] for start, end in spans]), dtype=np.uint8),
            offsets=offsets,
            names=[self.names[i] for i in order],
            descriptions=[self.descriptions[i] for i in order],
            source_index=members.astype(np.int64),
            accessions=None if self.accessions is None else [self.accessions[i] for i in order],
        )


def read_sequence_file(path, alphabet_name_or_none, format=None):
    """The sequences of `path` as `_Parsed` columns, and the Easel alphabet they are in (the one
    named, else Easel's guess); `format` is Easel's name of the asserted format, or None."""
    format = easel_format(path, format)
    name = alphabet_name_or_none or guess_alphabet(path, format)
    alphabet = ALPHABETS[name]() if name else None
    plain = alphabet is not None and format in (None, "fasta")
    parsed = _read_plain_fasta(Path(path), alphabet) if plain else None
    if parsed is None:
        parsed, alphabet = _read_with_easel(path, alphabet, format)
    if not parsed.names:
        raise GpuhmmError(path, "sequence file holds no sequences")
    check_lengths(path, parsed.lengths, parsed.names.__getitem__)
    return parsed, alphabet


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
    return _Parsed(names, descriptions, b"".join(residues), ends - lengths, ends, accessions), alphabet


#: The plain reader's chunks: the records that start within this many bytes of the text, parsed
#: on threads side by side, each thread's temporary arrays a few times this.
PLAIN_CHUNK_BYTES = 1 << 24


_NOT_PLAIN = 255


_NEWLINE, _HEADER = ord("\n"), ord(">")


def _read_plain_fasta(fasta, alphabet):
    """Easel's reading of a FASTA file in its plain form, in C (plainfasta.c) or else vectorized
    with numpy; None for any other file, which Easel itself then reads (and reports on, if it is
    bad). The file is parsed in chunks of whole records on every core at once: an uncompressed
    one's chunks each read by its thread, a gzip one's as they are decompressed.

    Plain: the text starts with '>'; header lines hold printable ASCII, tabs and bytes 0x80-0xFF
    (Latin-1 or UTF-8 text, kept as bytes: Easel's C locale takes them for neither space nor
    control), no other whitespace or control byte that Easel's header_fasta would treat apart;
    sequence lines hold letters that the alphabet digitizes and '*' (a residue to Easel's FASTA
    reader), nothing else (gap symbols, spaces, tabs and CR go to Easel); lines end in LF.
    """
    table = _plain_residue_codes(alphabet_name(alphabet))
    parse = _parse_plain_chunk if _plain_scanner() is None else _scan_plain_chunk

    def parsed(text):
        if not text:  # a chunk in which no record starts
            return [], [], b"", np.zeros(0, np.int64), np.zeros(0, np.int64)
        return parse(text, table) if text.startswith(b">") else None

    threads = available_cpus()
    try:
        with open(fasta, "rb") as handle, ThreadPoolExecutor(threads) as pool:
            if handle.read(2) == GZIP_MAGIC or not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                chunks = _in_order(pool, parsed, _whole_records(fasta), threads)
            else:
                size, fd = os.fstat(handle.fileno()).st_size, handle.fileno()
                read = functools.partial(_records_from, fd, size=size)
                chunks = _in_order(pool, lambda start: parsed(read(start)), range(0, size, PLAIN_CHUNK_BYTES), threads)
            joined = _joined(chunks)
            pool.shutdown(cancel_futures=True)  # the chunks past one that is not plain
            return joined
    except (OSError, EOFError, zlib.error):
        return None


def _in_order(pool, function, items, ahead):
    """function(item) of each of `items` on `pool`, in their order, at most `ahead` pending past
    the one awaited: the text of a few chunks a thread in memory at once."""
    pending = collections.deque()
    for item in items:
        pending.append(pool.submit(function, item))
        if len(pending) > ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def _joined(chunks):
    """The `_Parsed` columns of parsed chunks in file order; None where one is not plain, or
    none holds a record."""
    names, descriptions, codes, starts, ends = [], [], [], [], []
    offset = 0
    for chunk in chunks:
        if chunk is None:
            return None
        names += chunk[0]
        descriptions += chunk[1]
        codes.append(chunk[2])
        starts.append(chunk[3] + offset)
        ends.append(chunk[4] + offset)
        offset += len(chunk[2])
    if not names:
        return None
    return _Parsed(names, descriptions, b"".join(codes), np.concatenate(starts), np.concatenate(ends))


def _records_from(fd, start, size):
    """The text of the records of file `fd` (`size` bytes) that start within PLAIN_CHUNK_BYTES
    from offset `start`: from the first line starting with '>' at or past it (the file's start
    for 0) to the first at or past the chunk's end."""
    first = _record_start(fd, start, size)
    end = min(start + PLAIN_CHUNK_BYTES, size)
    if first >= end:
        return b""
    return os.pread(fd, _record_start(fd, end, size) - first, first)


def _record_start(fd, at, size):
    """The offset of the first line starting with '>' at or past `at` (0 for 0), else `size`."""
    if at == 0:
        return 0
    step = 1 << 16
    for before in range(at - 1, size, step):  # each read starts on the last byte of the one before
        found = os.pread(fd, step + 1, before).find(b"\n>")
        if found >= 0:
            return before + found + 1
    return size


def _whole_records(fasta):
    """The text of `fasta` (gzip, or a file that is not a regular one) in pieces of about
    PLAIN_CHUNK_BYTES that each end where a line starting with '>' begins (or at the end of the
    file)."""
    with open(fasta, "rb") as handle:
        compressed = handle.read(2) == GZIP_MAGIC
    with (gzip.open if compressed else open)(fasta, "rb") as handle:
        carried = b""
        while block := handle.read(PLAIN_CHUNK_BYTES):
            text = carried + block
            cut = text.rfind(b"\n>") + 1
            if cut:
                yield text[:cut]
            carried = text[cut:]
        if carried:
            yield carried


@functools.cache
def _plain_scanner():
    """plainfasta.c's chunk parser, or None where it cannot be built."""
    function = hostc.function(
        Path(__file__).with_name("plainfasta.c"), "plain_fasta_chunk", "reading FASTA", "numpy reads it, slower"
    )
    if function is not None:
        function.restype = ctypes.c_int64
        function.argtypes = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p] + [ctypes.c_void_p] * 4
        function.argtypes += [ctypes.c_int64, ctypes.c_void_p]
    return function


#: Bytes a record takes at least, as a rule: the records a chunk's parse has room for at first.
_RECORD_BYTES = 64


def _scan_plain_chunk(raw, table):
    """`_parse_plain_chunk`'s outputs for `raw`, from plainfasta.c (the codes as a numpy array).
    The names and descriptions come back as text, one a line, split in one call."""
    capacity, scan = len(raw) // _RECORD_BYTES + 1, _plain_scanner()
    codes, names, descriptions = (np.empty(len(raw), np.uint8) for _ in range(3))
    while True:
        ends, sizes = np.empty(capacity, np.int64), np.zeros(3, np.int64)
        pointers = (array.ctypes.data for array in (codes, ends, names, descriptions))
        count = scan(raw, len(raw), table, *pointers, capacity, sizes.ctypes.data)
        if count != -2:
            break
        capacity = raw.count(b">")  # each record starts with one
    if count < 0:
        return None
    ncodes, nnames, ndescriptions = sizes.tolist()
    ends = ends[:count]
    return (
        names[:nnames].tobytes().split(b"\n")[:-1],
        descriptions[:ndescriptions].tobytes().split(b"\n")[:-1],
        codes[:ncodes],
        np.concatenate([[0], ends[:-1]]),
        ends,
    )


def _parse_plain_chunk(raw, table):
    """Names, descriptions, digital codes, and where each sequence starts and ends in them, of
    the records in `raw`, which starts with '>'; None where the text is not plain.

    The whole text is translated at once, line feeds dropped; its headers come out as codes
    too, between the sequences, and are passed over.
    """
    text = np.frombuffer(raw, dtype=np.uint8)
    newlines = np.flatnonzero(text == _NEWLINE)
    headers = np.flatnonzero(text == _HEADER)
    header_starts = headers[(headers == 0) | (text[headers - 1] == _NEWLINE)]
    header_ends = np.append(newlines, len(text))[np.searchsorted(newlines, header_starts)]
    # A record's sequence lines run from the end of its header line to the next header.
    sequence_starts = np.minimum(header_ends + 1, len(text))
    sequence_ends = np.append(header_starts[1:], len(text))
    codes = raw.translate(table, b"\n")
    # Every header byte after '>', with the line feed that ends each header line.
    header_sizes = sequence_starts - header_starts - 1
    header_text = text[
        np.arange(int(header_sizes.sum()), dtype=np.int64)
        + np.repeat(header_starts + 1 - (np.cumsum(header_sizes) - header_sizes), header_sizes)
    ].tobytes()
    if header_text.translate(None, _PRINTABLE_LINES):
        return None
    # Bytes the table rejects may sit in headers, never in sequences.
    not_plain = bytes([_NOT_PLAIN])
    if codes.count(not_plain) != (b">" * len(header_starts) + header_text).translate(table, b"\n").count(not_plain):
        return None
    fields = _HEADER_FIELDS.findall(header_text)
    if len(fields) != len(header_starts):  # a header without a name: Easel reports it
        return None
    names, descriptions = (list(column) for column in zip(*fields))
    return (
        names,
        descriptions,
        codes,
        sequence_starts - np.searchsorted(newlines, sequence_starts),
        sequence_ends - np.searchsorted(newlines, sequence_ends),
    )


#: What a plain header line may hold: printable ASCII, tabs and bytes past ASCII (and the line
#: feeds that end them).
_PRINTABLE_LINES = bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100)) + b"\t\n"


#: Easel's header_fasta on such a line (after '>'): spaces, the name up to the next space or
#: tab, spaces, and the description to the end of the line.
_HEADER_FIELDS = re.compile(rb"^[ \t]*([^ \t\n]+)[ \t]*(.*)$", re.MULTILINE)


@functools.cache
def _plain_residue_codes(name):
    """Byte → the alphabet's digital code for the letters it digitizes and '*', _NOT_PLAIN otherwise."""
    alphabet = ALPHABETS[name]()
    codes = bytearray([_NOT_PLAIN]) * 256
    for letter in string.ascii_letters + "*":
        try:
            (code,) = alphabet.encode(letter)
        except ValueError:
            continue
        codes[ord(letter)] = code
    return bytes(codes)


def _easel_problem(error):
    return str(error).removeprefix("Could not parse file: ").strip()
