"""Easel's FASTA reader (easel/esl_sqio_ascii.c: header_fasta, seq_fasta) for FASTA in its plain
form, on every core: the file in chunks of whole records, each parsed in C (plainfasta.c) or,
where no C compiler is found, with numpy; `fasta.read_sequence_file` sends every other file to
Easel itself.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import gzip
import itertools
import os
import re
import stat
import string
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .._host import available_cpus
from ..engine import hostc
from .inputs import GZIP_MAGIC

#: The plain reader's chunks: the records that start within this many bytes of the text, parsed
#: on threads side by side, each thread's temporary arrays a few times this.
PLAIN_CHUNK_BYTES = 1 << 24


_NOT_PLAIN = 255


_NEWLINE, _HEADER = ord("\n"), ord(">")


def read(fasta, alphabet):
    """Easel's reading of a FASTA file in its plain form, in C (plainfasta.c) or else vectorized
    with numpy: the names, descriptions, codes, starts and ends of `fasta.read_sequence_file`'s
    columns; None for any other file, or one without a record, which Easel itself then reads
    (and reports on, if it is bad). The file is parsed in chunks of whole records on every core
    at once: an uncompressed one's chunks each read by its thread, a gzip one's as they are
    decompressed.

    Plain: the text starts with '>'; header lines hold printable ASCII, tabs and bytes 0x80-0xFF
    (Latin-1 or UTF-8 text, kept as bytes: Easel's C locale takes them for neither space nor
    control), no other whitespace or control byte that Easel's header_fasta would treat apart;
    sequence lines hold letters that the alphabet digitizes and '*' (a residue to Easel's FASTA
    reader), nothing else (gap symbols, spaces, tabs and CR go to Easel); lines end in LF.
    """
    columns = next(read_pieces(fasta, alphabet), None)
    return columns if columns is not None and columns[0] else None


def read_pieces(fasta, alphabet, piece_bytes=None):
    """`read`'s columns piece by piece, in file order: the records that start within each
    `piece_bytes` of the text (about; None: the whole file, one piece), the next piece parsed
    when the one before is taken. A piece may hold no record. None in place of a piece that is
    not plain, or where the file cannot be read, and nothing after it."""
    table = _plain_residue_codes(alphabet)
    parse = _parse_plain_chunk if _plain_scanner() is None else _scan_plain_chunk

    def parsed(text, out, first=0):
        """The chunk `text`'s columns, its codes in `out`, its starts and ends from `first` on."""
        if not text:  # a chunk in which no record starts
            return [], [], out[:0], np.zeros(0, np.int64), np.zeros(0, np.int64)
        done = parse(text, table, out) if text.startswith(b">") else None
        if done is None:
            return None
        names, descriptions, codes, starts, ends = done
        return names, descriptions, codes, starts + first, ends + first

    threads, chunks = available_cpus(), None if piece_bytes is None else max(1, piece_bytes // PLAIN_CHUNK_BYTES)
    try:
        with open(fasta, "rb") as handle, ThreadPoolExecutor(threads) as pool:
            if handle.read(2) == GZIP_MAGIC or not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                own = functools.partial(_in_order, pool, lambda text: parsed(text, np.empty(len(text), np.uint8)))
                pieces = ((own(texts, threads), None) for texts in _grouped(_whole_records(fasta), chunks))
            else:
                size, fd = os.fstat(handle.fileno()).st_size, handle.fileno()
                starts = _grouped(range(0, size, PLAIN_CHUNK_BYTES), chunks)
                pieces = (_piece(fd, size, group, parsed, pool, threads) for group in starts)
            for parsed_chunks, into in pieces:
                columns = _joined(parsed_chunks, into)
                del parsed_chunks, into
                if columns is None:
                    pool.shutdown(cancel_futures=True)  # the chunks past one that is not plain
                    break
                yield columns
                del columns  # a piece taken is the caller's to free while the next is read
            else:
                return
    except (OSError, EOFError, zlib.error):
        pass
    yield None


def _piece(fd, size, starts, parsed, pool, threads):
    """(the parsed chunks, in order, and the buffer their codes lie in) of the piece of file `fd`
    whose chunks start at `starts`: each chunk's codes where its text starts in the piece, so
    that nothing joins them after."""
    base = _record_start(fd, starts[0], size)
    into = np.empty(_record_start(fd, min(starts[-1] + PLAIN_CHUNK_BYTES, size), size) - base, np.uint8)

    def chunk(start):
        first, text = _records_from(fd, start, size)
        return parsed(text, into[first - base : first - base + len(text)], first - base)

    return _in_order(pool, chunk, starts, threads), into


def _grouped(items, size):
    """`items` in lists of `size` (None: one list of them all), the last perhaps shorter."""
    items = iter(items)
    while group := list(itertools.islice(items, size)):
        yield group


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


def _joined(chunks, into):
    """The columns of parsed chunks in file order; None where one is not plain. Given `into`,
    the chunks' codes lie in it and their starts and ends count from its start; else each
    chunk's codes are its own, joined here."""
    names, descriptions, codes = [], [], [np.zeros(0, np.uint8)]
    starts, ends = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    offset = 0
    for chunk in chunks:
        if chunk is None:
            return None
        names += chunk[0]
        descriptions += chunk[1]
        codes.append(chunk[2])
        starts.append(chunk[3] + offset)
        ends.append(chunk[4] + offset)
        offset += 0 if into is not None else len(chunk[2])
    codes = memoryview(into if into is not None else np.concatenate(codes))
    return names, descriptions, codes, np.concatenate(starts), np.concatenate(ends)


def _records_from(fd, start, size):
    """(offset, text) of the records of file `fd` (`size` bytes) that start within
    PLAIN_CHUNK_BYTES from offset `start`: from the first line starting with '>' at or past it
    (the file's start for 0) to the first at or past the chunk's end."""
    first = _record_start(fd, start, size)
    end = min(start + PLAIN_CHUNK_BYTES, size)
    if first >= end:
        return first, b""
    return first, os.pread(fd, _record_start(fd, end, size) - first, first)


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
    arguments = [ctypes.c_char_p, ctypes.c_int64, ctypes.c_char_p] + [ctypes.c_void_p] * 4
    arguments += [ctypes.c_int64, ctypes.c_void_p]
    return _c_function("plain_fasta_chunk", "reading FASTA", "numpy reads it, slower", ctypes.c_int64, arguments)


def gathered(codes, starts, ends, members):
    """The residues codes[starts[m]:ends[m]] of each record m of `members` (an int64 array),
    end to end in that order, as a numpy array: plainfasta.c copies them, else Python joins them."""
    gather = _gatherer()
    if gather is None:
        view = memoryview(codes)
        spans = zip(starts[members].tolist(), ends[members].tolist())
        return np.frombuffer(b"".join([view[start:end] for start, end in spans]), np.uint8)
    source = np.frombuffer(codes, np.uint8)
    starts, ends, members = (np.ascontiguousarray(array, np.int64) for array in (starts, ends, members))
    out = np.empty(int((ends[members] - starts[members]).sum()), np.uint8)
    arrays = (source, starts, ends, members)
    gather(*(array.ctypes.data for array in arrays), len(members), out.ctypes.data)
    return out


@functools.cache
def _gatherer():
    """plainfasta.c's gathering of records into a shard, or None where it cannot be built."""
    arguments = [ctypes.c_void_p] * 4 + [ctypes.c_int64, ctypes.c_void_p]
    return _c_function("gather_records", "gathering shards", "Python joins them, slower", None, arguments)


def _c_function(name, what, instead, restype, argtypes):
    """plainfasta.c's function `name` as ctypes calls it, or None where it cannot be built
    (`hostc.function` says so with `what` and `instead`)."""
    function = hostc.function(Path(__file__).with_name("plainfasta.c"), name, what, instead)
    if function is not None:
        function.restype, function.argtypes = restype, argtypes
    return function


#: Bytes a record takes at least, as a rule: the records a chunk's parse has room for at first.
_RECORD_BYTES = 64


def _scan_plain_chunk(raw, table, codes):
    """`_parse_plain_chunk`'s outputs for `raw`, from plainfasta.c. The names and descriptions
    come back as text, one a line, split in one call."""
    capacity, scan = len(raw) // _RECORD_BYTES + 1, _plain_scanner()
    names, descriptions = (np.empty(len(raw), np.uint8) for _ in range(2))
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


def _parse_plain_chunk(raw, table, out):
    """Names, descriptions, digital codes (written to the start of `out`, as long as `raw`),
    and where each sequence starts and ends in them, of the records in `raw`, which starts with
    '>'; None where the text is not plain.

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
    out[: len(codes)] = np.frombuffer(codes, np.uint8)
    return (
        names,
        descriptions,
        out[: len(codes)],
        sequence_starts - np.searchsorted(newlines, sequence_starts),
        sequence_ends - np.searchsorted(newlines, sequence_ends),
    )


#: What a plain header line may hold: printable ASCII, tabs and bytes past ASCII (and the line
#: feeds that end them).
_PRINTABLE_LINES = bytes(range(0x20, 0x7F)) + bytes(range(0x80, 0x100)) + b"\t\n"


#: Easel's header_fasta on such a line (after '>'): spaces, the name up to the next space or
#: tab, spaces, and the description to the end of the line.
_HEADER_FIELDS = re.compile(rb"^[ \t]*([^ \t\n]+)[ \t]*(.*)$", re.MULTILINE)


def _plain_residue_codes(alphabet):
    """Byte → the alphabet's digital code for the letters it digitizes and '*', _NOT_PLAIN otherwise."""
    codes = bytearray([_NOT_PLAIN]) * 256
    for letter in string.ascii_letters + "*":
        try:
            (code,) = alphabet.encode(letter)
        except ValueError:
            continue
        codes[ord(letter)] = code
    return bytes(codes)
