"""The sequence database: FASTA parsed once by Easel into digital shards with a checked manifest.

A database is a directory:

    manifest.json      format, alphabet, Z (total sequences), residues, one entry per shard
    shard-0000.npz     digital residues, offsets, names, descriptions, FASTA positions

Shards are balanced by residues and sorted longest first inside, which is the order the GPU
warp blocks want. Residues are Easel's digital codes exactly as `hmmsearch` reads them, so
lowercase, degenerate residues and a trailing `*` mean what they mean to HMMER: FASTA in its
plain form (most files) is read by a vectorized equivalent of Easel's FASTA reader, tested
against it, and anything else by Easel itself, through pyhmmer. Each shard's SHA-256 is in
the manifest; readers refuse a shard that does not match it. A FASTA file searched by workers
of the same process is never written: its shards stay in memory (`makedb` without an output
directory), read by a helper process while the CLI starts up (`ReadAhead`).
"""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import functools
import gzip
import hashlib
import heapq
import io
import json
import operator
import os
import pickle
import re
import socket
import string
import struct
import subprocess
import sys
import threading
import uuid
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pyhmmer.easel

from ._io import GZIP_MAGIC, InputFile, atomic_outputs
from .errors import GpuhmmError

FORMAT = "gpuhmm-seqdb/1"
MANIFEST = "manifest.json"

#: p7_Pipeline() refuses longer targets ("Target sequence length > 100K, over comparison
#: pipeline limit"); hmmsearch then stops with no tables. makedb stops the same way, earlier.
MAX_TARGET_LENGTH = 100_000

ALPHABETS = {
    "amino": pyhmmer.easel.Alphabet.amino,
    "dna": pyhmmer.easel.Alphabet.dna,
    "rna": pyhmmer.easel.Alphabet.rna,
}


def alphabet_name(alphabet):
    for name, make in ALPHABETS.items():
        if alphabet == make():
            return name
    raise ValueError(f"unsupported alphabet {alphabet!r}")


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    file: str
    sequences: int
    residues: int
    max_length: int
    sha256: str  # of the shard file; for a shard held in memory, IN_MEMORY + a token unique to it


@dataclasses.dataclass(frozen=True)
class SequenceShard:
    """One shard in memory: columnar arrays, longest sequence first."""

    residues: np.ndarray  # uint8 digital codes, all sequences end to end
    offsets: np.ndarray  # int64, n + 1
    names: collections.abc.Sequence  # of str: a list, or a loaded shard's `_PackedText`
    descriptions: collections.abc.Sequence
    source_index: np.ndarray  # int64: position of each sequence in the FASTA file

    @property
    def lengths(self):
        return np.diff(self.offsets)

    def to_block(self, alphabet, order):
        """The sequences at indices `order` as a pyhmmer `DigitalSequenceBlock`."""
        sequences = [
            pyhmmer.easel.DigitalSequence(
                alphabet,
                name=self.names[index],
                description=self.descriptions[index],
                sequence=self.residues[self.offsets[index]:self.offsets[index + 1]],
            )
            for index in order.tolist()
        ]
        return pyhmmer.easel.DigitalSequenceBlock(alphabet, sequences)


@dataclasses.dataclass(frozen=True)
class SequenceDatabase:
    """An opened database directory; shards are loaded (and verified) on demand."""

    path: Path
    alphabet_name: str
    sequences: int
    residues: int
    max_length: int
    shards: tuple

    @property
    def alphabet(self):
        return ALPHABETS[self.alphabet_name]()

    @classmethod
    def open(cls, path):
        # Absolute, because workers of an external cluster run in other directories.
        path = Path(path).absolute()
        manifest_path = path / MANIFEST if path.is_dir() else path
        if not manifest_path.is_file():
            raise GpuhmmError(path, "not a gpuhmm sequence database (no manifest.json); build one with `gpuhmm makedb`")
        try:
            manifest = json.loads(manifest_path.read_text())
            if manifest.get("format") != FORMAT:
                raise GpuhmmError(manifest_path, f"database format {manifest.get('format')!r} is not {FORMAT!r}; rebuild it with `gpuhmm makedb`")
            return cls(
                path=manifest_path.parent,
                alphabet_name=manifest["alphabet"],
                sequences=manifest["sequences"],
                residues=manifest["residues"],
                max_length=manifest["max_length"],
                shards=tuple(ShardInfo(**entry) for entry in manifest["shards"]),
            )
        except (ValueError, KeyError, TypeError) as error:
            raise GpuhmmError(manifest_path, f"damaged database manifest ({error})") from None

    def load_shard(self, index):
        info = self.shards[index]
        if info.sha256.startswith(IN_MEMORY):
            if info.sha256 not in _held:
                raise GpuhmmError(self.path, "read into another process's memory, or released; a cluster's "
                                             "workers need a database built by `gpuhmm makedb`")
            return _held[info.sha256]
        shard_path = self.path / info.file
        try:
            data = _read_whole(shard_path)
        except OSError as error:
            raise GpuhmmError(shard_path, f"cannot read database shard ({error.strerror})") from None
        if hashlib.sha256(data).hexdigest() != info.sha256:
            raise GpuhmmError(shard_path, "database shard does not match its manifest checksum (stale or damaged); rebuild with `gpuhmm makedb`")
        try:
            return _decode_shard(data)
        except ValueError as error:
            raise GpuhmmError(shard_path, f"not a database shard as `gpuhmm makedb` writes them ({error})") from None


def makedb(fasta, outdir, shards=1, alphabet=None, read_ahead=None):
    """Read `fasta` (plain or gzip) as Easel does and write a sharded database to `outdir`.

    `alphabet` is "amino", "dna", "rna" or None to let Easel guess from the file. With `outdir`
    None nothing is written: the database lives in this process's memory, for a search whose
    workers share the process; a `ReadAhead` of the file may have read it already.
    Returns the opened `SequenceDatabase`.
    """
    fasta = Path(fasta)
    if shards < 1:
        raise GpuhmmError("--shards", f"must be at least 1, not {shards}")
    if outdir is None:
        read = read_ahead.take(fasta, shards, alphabet) if read_ahead is not None else None
        name, held = read or _read_shards(fasta, alphabet, shards)
        return _held_database(fasta, name, held)
    parsed, alphabet = _read_fasta(fasta, alphabet)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / MANIFEST).unlink(missing_ok=True)
    infos = [_write_shard(outdir / f"shard-{index:04d}.npz", parsed.shard(members))
             for index, members in enumerate(_shard_members(parsed.lengths, shards))]
    manifest = {
        "format": FORMAT,
        "alphabet": alphabet_name(alphabet),
        "source": {"path": str(fasta.resolve()), "bytes": fasta.stat().st_size},
        "sequences": len(parsed.lengths),
        "residues": sum(info.residues for info in infos),
        "max_length": max(info.max_length for info in infos),
        "shards": [dataclasses.asdict(info) for info in infos],
    }
    # The manifest goes last, so a database without one is recognisably unfinished.
    with atomic_outputs(outdir / MANIFEST) as (temporary,):
        temporary.write_text(json.dumps(manifest, indent=1))
    return SequenceDatabase.open(outdir)


def _read_shards(fasta, alphabet, shards):
    """The alphabet's name and `shards` in-memory shards of `fasta`."""
    parsed, easel_alphabet = _read_fasta(fasta, alphabet)
    return alphabet_name(easel_alphabet), [parsed.shard(members) for members in _shard_members(parsed.lengths, shards)]


def _shard_members(lengths, shards):
    return [_longest_first(members, lengths) for members in _balance_by_residues(lengths, shards)]


def _held_database(fasta, name, shards):
    """A database of `shards` held in this process's memory."""
    token = uuid.uuid4().hex
    infos = []
    for index, shard in enumerate(shards):
        infos.append(_shard_info(f"shard-{index:04d}", shard.offsets, f"{IN_MEMORY}{token}:{index}"))
        _held[infos[-1].sha256] = shard
    return SequenceDatabase(
        path=fasta.absolute(), alphabet_name=name, sequences=sum(len(shard.names) for shard in shards),
        residues=sum(info.residues for info in infos), max_length=max(info.max_length for info in infos),
        shards=tuple(infos),
    )


#: Files up to this size are read ahead. The helper and its message hold the shards twice more
#: for a moment, and past a few GB the search takes so long that the seconds saved do not count.
READ_AHEAD_MAX_BYTES = 2 * 1024**3


class ReadAhead:
    """A FASTA file read into in-memory shards by a helper process while this one starts up.

    Reading 100 M residues holds this process's interpreter lock for seconds, which importing
    CuPy and Dask, reading the models and starting the workers would otherwise wait behind.
    The helper guesses the alphabet as Easel does; `makedb` takes its shards where that is the
    alphabet wanted, and otherwise (or if the helper failed) reads the file itself. The helper
    is a fresh interpreter, not a multiprocessing child, so no caller's main module is re-run.
    """

    def __init__(self, fasta, shards=1):
        self.fasta, self.shards = Path(fasta), shards
        environment = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
        self._connection, helper_end = socket.socketpair()
        with helper_end:
            self._process = subprocess.Popen(
                [sys.executable, "-c", "from gpuhmm.seqdb import _helper_main; _helper_main()", str(fasta), str(shards)],
                stdin=subprocess.DEVNULL, stdout=helper_end.fileno(), env=environment)
        # Received in a thread as it comes. A socket, not a pipe: one MSG_WAITALL receive takes
        # the whole message with the interpreter lock released once, where a pipe's 64 KB reads
        # would each wait for the lock again behind this process's busy threads.
        self._outcome = ("failed",)
        self._receiving = threading.Thread(target=self._receive, name="gpuhmm-read-ahead", daemon=True)
        self._receiving.start()

    def _receive(self):
        try:
            (size,) = struct.unpack("<Q", _receive_exactly(self._connection, 8))
            self._outcome = pickle.loads(_receive_exactly(self._connection, size))
        except (EOFError, OSError, pickle.UnpicklingError):  # the helper died or was stopped
            pass

    def take(self, fasta, shards, alphabet):
        """(alphabet name, shards) as `makedb(fasta, None, shards, alphabet)` would read them, or
        None where this read cannot stand in for that one. Raises the helper's GpuhmmError."""
        if Path(fasta) != self.fasta or shards != self.shards:
            self.close()
            return None
        self._receiving.join()
        self.close()
        outcome = self._outcome
        if outcome[0] == "error":
            raise GpuhmmError(*outcome[1:])
        if outcome[0] == "shards" and alphabet in (None, outcome[1]):
            return outcome[1], outcome[2]
        return None

    def close(self):
        """Stop the helper if it is still reading (the search stopped first)."""
        if self._connection.fileno() == -1:
            return
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        self._connection.shutdown(socket.SHUT_RDWR)  # wakes the receiving thread
        self._receiving.join()
        self._connection.close()


def _receive_exactly(connection, size):
    message = bytearray(size)
    view, received = memoryview(message), 0
    while received < size:
        count = connection.recv_into(view[received:], size - received, socket.MSG_WAITALL)
        if not count:
            raise EOFError("the helper closed its end early")
        received += count
    return message


def _helper_main():
    """The helper's side of `ReadAhead` (argv: FASTA file, shards). Writes to stdout, the
    socket, the length and pickle of ("shards", alphabet name, shards), ("error", source,
    problem) for a GpuhmmError, or ("undetermined",) / ("failed",) for the caller to read the
    file itself."""
    fasta, shards = Path(sys.argv[1]), int(sys.argv[2])
    try:
        name = guess_alphabet(fasta)
        outcome = ("shards", *_read_shards(fasta, name, shards)) if name else ("undetermined",)
    except GpuhmmError as error:
        outcome = ("error", error.source, error.problem)
    except Exception:  # noqa: BLE001 - the caller reads the file itself and reports the problem in full
        outcome = ("failed",)
    message = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.write(struct.pack("<Q", len(message)))
    sys.stdout.buffer.write(message)
    sys.stdout.buffer.flush()


def read_sequences(fasta, alphabet):
    """Every sequence of `fasta` in file order, as pyhmmer `DigitalSequence`s; `alphabet` is
    "amino", "dna" or "rna", and a file that looks like another alphabet is refused."""
    guessed = guess_alphabet(fasta)
    if guessed and guessed != alphabet:
        raise GpuhmmError(fasta, f"alphabet mismatch: the sequences look like {guessed}, {alphabet} is needed")
    parsed, easel_alphabet = _read_fasta(fasta, alphabet)
    everything = np.arange(len(parsed.names))
    return list(parsed.shard(everything).to_block(easel_alphabet, everything))


def release(database):
    """Free the shards of a database held in memory (makedb without outdir)."""
    for info in database.shards:
        _held.pop(info.sha256, None)


#: Shards of databases held in memory, by their token. The database object stays small: task
#: arguments are serialized even for workers in this process.
IN_MEMORY = "in-memory:"
_held = {}


def guess_alphabet(fasta):
    """Easel's guess of the alphabet name of a FASTA file, or None when it cannot tell."""
    with contextlib.ExitStack() as stack:
        try:
            handle, _ = _open_fasta(fasta, None, stack)
        except _UndeterminedAlphabet:
            return None
        return alphabet_name(handle.alphabet)


class _UndeterminedAlphabet(GpuhmmError):
    pass


def _open_fasta(fasta, alphabet, stack):
    """An Easel FASTA reader on `fasta` and the `InputFile` under it."""
    fasta = Path(fasta)
    if not fasta.exists():
        raise GpuhmmError(fasta, "sequence file not found")
    if fasta.is_dir():
        raise GpuhmmError(fasta, "is a directory, not a FASTA file or a gpuhmm database")
    try:
        source = InputFile(fasta, stack)
    except OSError as error:
        raise GpuhmmError(fasta, f"cannot read sequence file ({error.strerror or error})") from None
    with _fasta_errors(fasta, source):
        handle = pyhmmer.easel.SequenceFile(source.source, digital=True, alphabet=alphabet, format="fasta")
    return stack.enter_context(handle), source


@contextlib.contextmanager
def _fasta_errors(fasta, source):
    """pyhmmer's and gzip's reading errors, as one-line errors naming the file.

    A damaged gzip stream is the first cause of whatever else went wrong after it.
    """
    try:
        yield
    except (EOFError, ValueError, SystemError, OSError, GpuhmmError) as error:
        source.check_stream(fasta)
        if isinstance(error, GpuhmmError):
            raise
        if isinstance(error, EOFError):
            raise GpuhmmError(fasta, "sequence file is empty") from None
        if "Could not determine alphabet" in str(error):
            raise _UndeterminedAlphabet(fasta, "cannot tell whether the sequences are protein or nucleotide; pass --alphabet") from None
        if isinstance(error, OSError):
            raise GpuhmmError(fasta, f"cannot read sequence file ({error.strerror or error})") from None
        raise GpuhmmError(fasta, f"not a readable FASTA file ({_easel_problem(error)})") from None
    source.check_stream(fasta)


@dataclasses.dataclass(frozen=True)
class _Parsed:
    """A FASTA file's sequences in file order, as columns. Sequence i is the digital codes
    codes[starts[i]:ends[i]]; `codes` may hold other bytes between sequences."""

    names: list
    descriptions: list
    codes: bytes
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64

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
            offsets=offsets, names=[self.names[i] for i in order],
            descriptions=[self.descriptions[i] for i in order], source_index=members.astype(np.int64),
        )


def _read_fasta(fasta, alphabet_name_or_none):
    name = alphabet_name_or_none or guess_alphabet(fasta)
    alphabet = ALPHABETS[name]() if name else None
    parsed = _read_plain_fasta(Path(fasta), alphabet) if alphabet is not None else None
    if parsed is None:
        parsed, alphabet = _read_fasta_with_easel(fasta, alphabet)
    if not parsed.names:
        raise GpuhmmError(fasta, "sequence file holds no sequences")
    lengths = parsed.lengths
    if lengths.max() > MAX_TARGET_LENGTH:
        longest = int(np.argmax(lengths))
        raise GpuhmmError(
            fasta,
            f"sequence {parsed.names[longest]!r} has {int(lengths[longest]):,} residues; "
            f"HMMER's comparison pipeline stops at {MAX_TARGET_LENGTH:,} (hmmsearch fails with "
            f"'Target sequence length > 100K'); use nhmmer for long nucleotide targets",
        )
    return parsed, alphabet


def _read_fasta_with_easel(fasta, alphabet):
    names, descriptions, residues = [], [], []
    with contextlib.ExitStack() as stack:
        handle, source = _open_fasta(fasta, alphabet, stack)
        alphabet = handle.alphabet
        with _fasta_errors(fasta, source):
            for sequence in handle:
                # A copy, so that each Easel sequence is freed as soon as it is read.
                residues.append(bytes(sequence.sequence))
                names.append(sequence.name)
                descriptions.append(sequence.description)
    lengths = np.fromiter(map(len, residues), dtype=np.int64, count=len(residues))
    ends = np.cumsum(lengths)
    return _Parsed(names, descriptions, b"".join(residues), ends - lengths, ends), alphabet


#: The vectorized reader reads the text this many bytes at a time and parses it up to the last
#: record that starts in it, which bounds its temporary arrays to a few times this.
PLAIN_CHUNK_BYTES = 1 << 26
_NOT_PLAIN = 255
_NEWLINE, _HEADER = ord("\n"), ord(">")


def _read_plain_fasta(fasta, alphabet):
    """Easel's reading of a FASTA file in its plain form, vectorized with numpy; None for any
    other file, which Easel itself then reads (and reports on, if it is bad).

    Plain: the text starts with '>'; header lines hold printable ASCII and tabs, no other
    whitespace that Easel's header_fasta would treat apart; sequence lines hold letters that the
    alphabet digitizes and '*' (a residue to Easel's FASTA reader), nothing else (gap symbols,
    spaces, tabs and CR go to Easel); lines end in LF.
    """
    table = _plain_residue_codes(alphabet_name(alphabet))
    names, descriptions, codes, starts, ends = [], [], [], [], []
    offset = 0
    try:
        for text in _whole_records(fasta):
            chunk = _parse_plain_chunk(text, table) if text.startswith(b">") else None
            if chunk is None:
                return None
            names += chunk[0]
            descriptions += chunk[1]
            codes.append(chunk[2])
            starts.append(chunk[3] + offset)
            ends.append(chunk[4] + offset)
            offset += len(chunk[2])
    except (OSError, EOFError, zlib.error):
        return None
    if not names:
        return None
    return _Parsed(names, descriptions, b"".join(codes), np.concatenate(starts), np.concatenate(ends))


def _whole_records(fasta):
    """The text of `fasta` (plain or gzip) in pieces of about PLAIN_CHUNK_BYTES that each end
    where a line starting with '>' begins (or at the end of the file)."""
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
    header_text = text[np.arange(int(header_sizes.sum()), dtype=np.int64) + np.repeat(
        header_starts + 1 - (np.cumsum(header_sizes) - header_sizes), header_sizes)].tobytes()
    if header_text.translate(None, _PRINTABLE_LINES):
        return None
    # Bytes the table rejects may sit in headers, never in sequences.
    not_plain = bytes([_NOT_PLAIN])
    if codes.count(not_plain) != (b">" * len(header_starts) + header_text).translate(table, b"\n").count(not_plain):
        return None
    fields = _HEADER_FIELDS.findall(header_text.decode("ascii"))
    if len(fields) != len(header_starts):  # a header without a name: Easel reports it
        return None
    names, descriptions = (list(column) for column in zip(*fields))
    return (names, descriptions, codes, sequence_starts - np.searchsorted(newlines, sequence_starts),
            sequence_ends - np.searchsorted(newlines, sequence_ends))


#: What a plain header line may hold: printable ASCII and tabs (and the line feeds that end them).
_PRINTABLE_LINES = bytes(range(0x20, 0x7F)) + b"\t\n"
#: Easel's header_fasta on such a line (after '>'): spaces, the name up to the next space or
#: tab, spaces, and the description to the end of the line.
_HEADER_FIELDS = re.compile(r"^[ \t]*([^ \t\n]+)[ \t]*(.*)$", re.MULTILINE)


@functools.lru_cache(maxsize=None)
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


def _balance_by_residues(lengths, shards):
    """Each sequence (its file position), in file order, to the shard with the fewest residues so
    far. Streaming-friendly, and within one sequence length of the ideal balance."""
    if shards == 1:
        return [np.arange(len(lengths))]
    lightest = [(0, shard) for shard in range(shards)]  # a heap: (residues, shard), ties to the lower shard
    members = [[] for _ in range(shards)]
    for position, length in enumerate(lengths.tolist()):
        load, target = lightest[0]
        members[target].append(position)
        heapq.heapreplace(lightest, (load + max(length, 1), target))
    return [np.array(positions, dtype=np.int64) for positions in members]


def _longest_first(members, lengths):
    """File positions longest first, ties in file order (`members` are in file order)."""
    return members[np.argsort(-lengths[members], kind="stable")]


def _shard_info(file, offsets, sha256):
    lengths = np.diff(offsets)
    return ShardInfo(file=file, sequences=len(lengths), residues=int(lengths.sum()),
                     max_length=int(lengths.max(initial=0)), sha256=sha256)


def _write_shard(path, shard):
    names, name_offsets = _pack([name.encode() for name in shard.names])
    descriptions, description_offsets = _pack([description.encode() for description in shard.descriptions])
    buffer = io.BytesIO()
    np.savez(buffer, residues=shard.residues, offsets=shard.offsets, names=names, name_offsets=name_offsets,
             descriptions=descriptions, description_offsets=description_offsets, source_index=shard.source_index)
    data = buffer.getvalue()
    with atomic_outputs(path) as (temporary,):
        temporary.write_bytes(data)
    return _shard_info(path.name, shard.offsets, hashlib.sha256(data).hexdigest())


def _read_whole(path):
    """A file's bytes in a uint8 array, which the arrays of its shard then view (`_decode_shard`).
    Unlike a bytearray's, its memory is not zeroed first, holding the interpreter lock."""
    with open(path, "rb", buffering=0) as handle:
        data = np.empty(os.fstat(handle.fileno()).st_size, dtype=np.uint8)
        done = 0
        while done < len(data):
            count = handle.readinto(data[done:])
            if not count:
                break
            done += count
    return data[:done]  # a file that shrank since: the checksum then refuses it


def _decode_shard(data):
    """The shard in `data` (a shard file's bytes, as np.savez wrote them: each array stored
    uncompressed), its arrays views of `data`. np.load would copy every array 256 KB at a time,
    holding the interpreter lock: 0.15 to 0.2 s of a 150 M-residue shard, while a GPU worker's
    first tasks wait for their shards. Arrays of 8-byte items are copied into aligned memory
    (they are small: a few per sequence). Raises ValueError for any other layout."""
    arrays = {}
    with memoryview(data) as view, zipfile.ZipFile(_ReadOnlyView(view)) as archive:
        for member in archive.infolist():
            if member.compress_type != zipfile.ZIP_STORED or not member.filename.endswith(".npy"):
                raise ValueError(f"member {member.filename} is not an uncompressed array")
            signature, name_length, extra_length = struct.unpack_from("<4s22xHH", view, member.header_offset)
            if signature != b"PK\x03\x04":
                raise ValueError(f"member {member.filename} has no local header")
            start = member.header_offset + 30 + name_length + extra_length
            header = _ReadOnlyView(view[start:start + member.file_size])
            version = np.lib.format.read_magic(header)
            shape, fortran_order, dtype = (np.lib.format.read_array_header_1_0(header) if version == (1, 0)
                                           else np.lib.format.read_array_header_2_0(header))
            count = int(np.prod(shape))
            if fortran_order or dtype.hasobject or header.tell() + count * dtype.itemsize > member.file_size:
                raise ValueError(f"member {member.filename} is not a plain array")
            array = np.frombuffer(data, dtype=dtype, count=count, offset=start + header.tell()).reshape(shape)
            arrays[member.filename[:-len(".npy")]] = array if array.flags.aligned else array.copy()
    return SequenceShard(
        residues=arrays["residues"],
        offsets=arrays["offsets"],
        names=_PackedText(arrays["names"], arrays["name_offsets"]),
        descriptions=_PackedText(arrays["descriptions"], arrays["description_offsets"]),
        source_index=arrays["source_index"],
    )


class _ReadOnlyView(io.RawIOBase):
    """A seekable file over a memoryview, without copying it: zipfile and numpy read only the
    small headers through it."""

    def __init__(self, view):
        self._view, self._at = view, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        self._at = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: len(self._view)}[whence] + offset
        return self._at

    def tell(self):
        return self._at

    def readinto(self, buffer):
        count = max(0, min(len(buffer), len(self._view) - self._at))
        buffer[:count] = self._view[self._at:self._at + count]
        self._at += count
        return count


def _pack(strings):
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(text) for text in strings], out=offsets[1:])
    return np.frombuffer(b"".join(strings), dtype=np.uint8), offsets


class _PackedText(collections.abc.Sequence):
    """Strings stored end to end (UTF-8) with their offsets, as a shard file keeps its names and
    descriptions, each decoded when asked for. A GPU worker asks for those of its filters'
    survivors only; decoding all 460,000 names of a shard took 0.18 to 0.23 s of its
    interpreter lock, and every shard's first tasks asked for them as they left the GPU
    together, while the lock was wanted most (4 × H200)."""

    def __init__(self, data, offsets):
        self._data, self._offsets = data, offsets

    def __len__(self):
        return len(self._offsets) - 1

    def __getitem__(self, index):
        position = operator.index(index)
        if position < 0:
            position += len(self)
        if not 0 <= position < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} strings")
        return self._data[self._offsets[position]:self._offsets[position + 1]].tobytes().decode()

    def __iter__(self):
        raw, offsets = self._data.tobytes(), self._offsets.tolist()
        return (raw[start:end].decode() for start, end in zip(offsets[:-1], offsets[1:]))


class FirstPositions:
    """For a shard's (name, length) pairs, the 1-based file position of the first sequence with
    that pair, found through a vectorized index: each name's 64-bit polynomial hash, with its
    length, sorted. A Python dictionary of the pairs took 0.3 to 0.5 s of a worker's interpreter
    lock per shard of 460,000 sequences. Every answer is checked against the name itself, and a
    hash shared by two pairs falls back to a scan, so the index only ever speeds the answer up."""

    _PRIME = 0x100000001B3
    _LENGTH_MIX = 0x9E3779B97F4A7C15

    def __init__(self, shard):
        self._shard = shard
        self._lengths = shard.lengths
        names = shard.names
        data, offsets = (names._data, names._offsets) if isinstance(names, _PackedText) else _pack(
            [name.encode() for name in names])
        keys = self._keys(data, offsets, self._lengths)
        order = np.lexsort((shard.source_index, keys))
        ordered = keys[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = ordered[1:] != ordered[:-1]
        self._keys_sorted, self._first_member = ordered[first], order[first]

    @classmethod
    def _keys(cls, data, offsets, lengths):
        sizes = np.diff(offsets)
        powers = np.cumprod(np.full(int(sizes.max(initial=0)) + 1, cls._PRIME, dtype=np.uint64))
        places = np.arange(len(data), dtype=np.int64) - np.repeat(offsets[:-1], sizes)
        terms = (data.astype(np.uint64) + np.uint64(1)) * powers[places]
        keys = np.zeros(len(sizes), dtype=np.uint64)
        named = sizes > 0
        keys[named] = np.add.reduceat(terms, offsets[:-1][named]) if len(terms) else 0
        return keys ^ (lengths.astype(np.uint64) * np.uint64(cls._LENGTH_MIX))

    @classmethod
    def _key(cls, name, length):
        mask, power, key = (1 << 64) - 1, cls._PRIME, 0
        for byte in name.encode():
            key = (key + (byte + 1) * power) & mask
            power = (power * cls._PRIME) & mask
        return key ^ ((length * cls._LENGTH_MIX) & mask)

    def find(self, name, length):
        key = np.uint64(self._key(name, length))
        at = int(np.searchsorted(self._keys_sorted, key))
        if at < len(self._keys_sorted) and self._keys_sorted[at] == key:
            member = int(self._first_member[at])
            if self._shard.names[member] == name and int(self._lengths[member]) == length:
                return int(self._shard.source_index[member]) + 1
        matches = [int(self._shard.source_index[member]) for member in np.flatnonzero(self._lengths == length)
                   if self._shard.names[member] == name]
        if not matches:
            raise KeyError((name, length))
        return min(matches) + 1
