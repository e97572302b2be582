"""The database's on-disk format: shard files, their manifest entries, and the columns a shard holds.

A shard file is an uncompressed `np.savez` archive (residues, offsets, packed names and
descriptions, file positions, and packed accessions where the sequences have them);
`decode_shard` maps it without copying the residues.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import hashlib
import io
import operator
import os
import struct
import zipfile

import numpy as np
import pyhmmer.easel

from .._atomic import atomic_outputs

FORMAT = "gpuhmm-seqdb/1"
MANIFEST = "manifest.json"


def write_shard(path, shard):
    names, name_offsets = pack(list(shard.names))
    descriptions, description_offsets = pack(list(shard.descriptions))
    # Only where there are any: a FASTA file's shards stay as they always were.
    accessions = {}
    if shard.accessions is not None:
        accessions = dict(zip(("accessions", "accession_offsets"), pack(list(shard.accessions))))
    buffer = io.BytesIO()
    np.savez(
        buffer,
        residues=shard.residues,
        offsets=shard.offsets,
        names=names,
        name_offsets=name_offsets,
        descriptions=descriptions,
        description_offsets=description_offsets,
        source_index=shard.source_index,
        **accessions,
    )
    data = buffer.getvalue()
    with atomic_outputs(path) as (temporary,):
        temporary.write_bytes(data)
    return shard_info(path.name, shard.offsets, hashlib.sha256(data).hexdigest())


def read_whole(path):
    """A file's bytes in a uint8 array, which the arrays of its shard then view (`decode_shard`).
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


def decode_shard(data):
    """The shard in `data` (a shard file's bytes, as np.savez wrote them: each array stored
    uncompressed), its arrays views of `data`. np.load would copy every array 256 KB at a time,
    holding the interpreter lock while a GPU worker's first tasks wait for their shards. Arrays
    of 8-byte items are copied into aligned memory (they are small: a few per sequence). Raises
    ValueError for any other layout."""
    arrays = {}
    with memoryview(data) as view, zipfile.ZipFile(_ReadOnlyView(view)) as archive:
        for member in archive.infolist():
            if member.compress_type != zipfile.ZIP_STORED or not member.filename.endswith(".npy"):
                raise ValueError(f"member {member.filename} is not an uncompressed array")
            signature, name_length, extra_length = struct.unpack_from("<4s22xHH", view, member.header_offset)
            if signature != b"PK\x03\x04":
                raise ValueError(f"member {member.filename} has no local header")
            start = member.header_offset + 30 + name_length + extra_length
            header = _ReadOnlyView(view[start : start + member.file_size])
            version = np.lib.format.read_magic(header)
            shape, fortran_order, dtype = (
                np.lib.format.read_array_header_1_0(header)
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0(header)
            )
            count = int(np.prod(shape))
            if fortran_order or dtype.hasobject or header.tell() + count * dtype.itemsize > member.file_size:
                raise ValueError(f"member {member.filename} is not a plain array")
            array = np.frombuffer(data, dtype=dtype, count=count, offset=start + header.tell()).reshape(shape)
            arrays[member.filename[: -len(".npy")]] = array if array.flags.aligned else array.copy()
    return SequenceShard(
        residues=arrays["residues"],
        offsets=arrays["offsets"],
        names=PackedText(arrays["names"], arrays["name_offsets"]),
        descriptions=PackedText(arrays["descriptions"], arrays["description_offsets"]),
        source_index=arrays["source_index"],
        accessions=PackedText(arrays["accessions"], arrays["accession_offsets"]) if "accessions" in arrays else None,
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
        buffer[:count] = self._view[self._at : self._at + count]
        self._at += count
        return count


def pack(strings):
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(text) for text in strings], out=offsets[1:])
    return np.frombuffer(b"".join(strings), dtype=np.uint8), offsets


class PackedText(collections.abc.Sequence):
    """Byte strings stored end to end with their offsets, as a shard file keeps its names,
    descriptions and accessions (the file's own bytes, whatever their encoding), each copied out
    when asked for. A GPU worker asks for those of its filters' survivors only, instead of
    holding its interpreter lock to copy every name of a shard while its first tasks leave the
    GPU together."""

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
        return self._data[self._offsets[position] : self._offsets[position + 1]].tobytes()

    def __iter__(self):
        raw, offsets = self._data.tobytes(), self._offsets.tolist()
        return (raw[start:end] for start, end in zip(offsets[:-1], offsets[1:]))


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
    names: collections.abc.Sequence  # of bytes, as in the file: a list, or a loaded shard's `PackedText`
    descriptions: collections.abc.Sequence  # of bytes
    source_index: np.ndarray  # int64: position of each sequence in the sequence file
    accessions: collections.abc.Sequence | None = None  # of bytes; None where no sequence has one

    @property
    def lengths(self):
        return np.diff(self.offsets)

    def to_block(self, alphabet, order):
        """The sequences at indices `order` as a pyhmmer `DigitalSequenceBlock`."""
        sequences = [
            pyhmmer.easel.DigitalSequence(
                alphabet,
                name=self.names[index],
                accession=None if self.accessions is None else self.accessions[index],
                description=self.descriptions[index],
                sequence=self.residues[self.offsets[index] : self.offsets[index + 1]],
            )
            for index in order.tolist()
        ]
        return pyhmmer.easel.DigitalSequenceBlock(alphabet, sequences)


def shard_info(file, offsets, sha256):
    lengths = np.diff(offsets)
    return ShardInfo(
        file=file,
        sequences=len(lengths),
        residues=int(lengths.sum()),
        max_length=int(lengths.max(initial=0)),
        sha256=sha256,
    )
