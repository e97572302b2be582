"""The sequence database: a sequence file parsed once by Easel into digital shards with a checked manifest.

A database is a directory:

    manifest.json      format, alphabet, Z (total sequences), residues, one entry per shard
    shard-0000.npz     digital residues, offsets, names, descriptions, file positions (and
                       accessions, where the sequences have them)

Shards are balanced by residues and sorted longest first inside, which is the order the GPU
warp blocks want. Residues are Easel's digital codes exactly as `hmmsearch` reads them, so
lowercase, degenerate residues and a trailing `*` mean what they mean to HMMER: FASTA in its
plain form (most files) is read by an equivalent of Easel's FASTA reader on every core, tested
against it, and anything else (EMBL, GenBank, alignments too) by Easel itself, through
pyhmmer (`fasta`). Each shard's SHA-256 is in the manifest; readers refuse a shard that does
not match it. A sequence file searched by workers of the same process is never written: its
shards stay in memory (`makedb` without an output directory), read by a helper process while
the CLI starts up (`ReadAhead`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .._atomic import atomic_outputs
from ..errors import GpuhmmError
from .fasta import ALPHABETS, alphabet_name, read_pieces, read_sequence_file
from .format import (
    FORMAT,
    MANIFEST,
    SequenceShard,
    ShardInfo,
    decode_shard,
    read_whole,
    shard_info,
    write_shard,
)

if TYPE_CHECKING:
    from pyhmmer.easel import Alphabet


class ReadsAhead(Protocol):
    """What `makedb` takes as a read of its file already under way (`readahead.ReadAhead`)."""

    def take(
        self, fasta: Path, shards: int, alphabet: str | None, format: str | None = None
    ) -> tuple[str, list[SequenceShard]] | None: ...


@dataclasses.dataclass(frozen=True)
class SequenceDatabase:
    """An opened database directory; shards are loaded (and verified) on demand."""

    path: Path
    alphabet_name: str
    sequences: int
    residues: int
    max_length: int
    shards: tuple[ShardInfo, ...]

    @property
    def alphabet(self) -> Alphabet:
        return ALPHABETS[self.alphabet_name]()

    @classmethod
    def open(cls, path: str | os.PathLike) -> SequenceDatabase:
        # Absolute, because workers of an external cluster run in other directories.
        path = Path(path).absolute()
        manifest_path = path / MANIFEST if path.is_dir() else path
        if not manifest_path.is_file():
            raise GpuhmmError(path, "not a gpuhmm sequence database (no manifest.json); build one with `gpuhmm makedb`")
        try:
            manifest = json.loads(manifest_path.read_text())
            if manifest.get("format") != FORMAT:
                raise GpuhmmError(
                    manifest_path,
                    f"database format {manifest.get('format')!r} is not {FORMAT!r}; rebuild it with `gpuhmm makedb`",
                )
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

    def load_shard(self, index: int) -> SequenceShard:
        info = self.shards[index]
        if info.sha256.startswith(IN_MEMORY):
            if info.sha256 not in _held:
                raise GpuhmmError(
                    self.path,
                    "read into another process's memory, or released; a cluster's "
                    "workers need a database built by `gpuhmm makedb`",
                )
            return _held[info.sha256]
        shard_path = self.path / info.file
        try:
            data = read_whole(shard_path)
        except OSError as error:
            raise GpuhmmError(shard_path, f"cannot read database shard ({error.strerror})") from None
        if hashlib.sha256(data).hexdigest() != info.sha256:
            raise GpuhmmError(
                shard_path,
                "database shard does not match its manifest checksum (stale or damaged); rebuild with `gpuhmm makedb`",
            )
        try:
            return decode_shard(data)
        except ValueError as error:
            raise GpuhmmError(shard_path, f"not a database shard as `gpuhmm makedb` writes them ({error})") from None


def content_digest(path: str | os.PathLike) -> str:
    """The SHA-256 that names the contents of the database `path`, so that searches can be
    shown to have met the same one: of a makedb directory's alphabet and shards (their
    checksums, in order), or of a sequence file's bytes. A file and a database built from it
    are not the same database to it."""
    path = Path(path)
    if path.is_dir() or path.name == MANIFEST:
        database = SequenceDatabase.open(path)
        identity = [database.alphabet_name, [info.sha256 for info in database.shards]]
        return hashlib.sha256(json.dumps(identity).encode()).hexdigest()
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def makedb(
    fasta: str | os.PathLike,
    outdir: str | os.PathLike | None,
    shards: int = 1,
    alphabet: str | None = None,
    read_ahead: ReadsAhead | None = None,
    format: str | None = None,
) -> SequenceDatabase:
    """Read the sequence file `fasta` (plain or gzip) as Easel does and write a sharded database
    to `outdir`.

    `alphabet` is "amino", "dna", "rna" or None to let Easel guess from the file; `format` is
    Easel's name of the file's format ("fasta", "embl", "stockholm", ...) or None to let Easel
    detect it. With `outdir` None nothing is written: the database lives in this process's
    memory, for a search whose workers share the process; a `ReadAhead` of the file may have
    read it already. Returns the opened `SequenceDatabase`.
    """
    fasta = Path(fasta)
    if shards < 1:
        raise GpuhmmError("--shards", f"must be at least 1, not {shards}")
    if outdir is None:
        read = read_ahead.take(fasta, shards, alphabet, format) if read_ahead is not None else None
        name, held = read or read_shards(fasta, alphabet, shards, format)
        return _held_database(fasta, name, held)
    parsed, alphabet = read_sequence_file(fasta, alphabet, format)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / MANIFEST).unlink(missing_ok=True)
    infos = [
        write_shard(outdir / f"shard-{index:04d}.npz", parsed.shard(members))
        for index, members in enumerate(_shard_members(parsed.lengths, shards))
    ]
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
    # A database built here before with more shards leaves shard files the manifest no longer names.
    listed = {info.file for info in infos}
    for stale in outdir.iterdir():
        if _SHARD_FILE.fullmatch(stale.name) and stale.name not in listed:
            stale.unlink(missing_ok=True)
    return SequenceDatabase.open(outdir)


#: The name makedb gives a shard file.
_SHARD_FILE = re.compile(r"shard-\d{4,}\.npz")


def read_shards(
    fasta: str | os.PathLike, alphabet: str | None, shards: int, format: str | None = None
) -> tuple[str, list[SequenceShard]]:
    """The alphabet's name and `shards` in-memory shards of `fasta`, in `format` (None: detected)."""
    parsed, easel_alphabet = read_sequence_file(fasta, alphabet, format)
    return alphabet_name(easel_alphabet), [parsed.shard(members) for members in _shard_members(parsed.lengths, shards)]


def held_pieces(fasta: str | os.PathLike, alphabet: str, shards: int, piece_bytes: int) -> Iterator[SequenceDatabase]:
    """Each piece of the plain FASTA `fasta` holding sequences (`fasta.read_pieces`: it raises
    `NotPlain`), as a database of `shards` shards held in memory, as `makedb` without an output
    directory makes one of a whole file; the caller releases each."""
    fasta, pieces = Path(fasta), read_pieces(fasta, alphabet, piece_bytes)
    while (parsed := next(pieces, None)) is not None:
        if parsed.names:
            held = [parsed.shard(members) for members in _shard_members(parsed.lengths, shards)]
            del parsed  # the piece's text, gathered into its shards: not held while they are searched
            yield _held_database(fasta, alphabet, held)


def _shard_members(lengths: np.ndarray, shards: int) -> list[np.ndarray]:
    return [_longest_first(members, lengths) for members in _balance_by_residues(lengths, shards)]


def _held_database(fasta: Path, name: str, shards: list[SequenceShard]) -> SequenceDatabase:
    """A database of `shards` held in this process's memory."""
    token = uuid.uuid4().hex
    infos = []
    for index, shard in enumerate(shards):
        infos.append(shard_info(f"shard-{index:04d}", shard.offsets, f"{IN_MEMORY}{token}:{index}"))
        _held[infos[-1].sha256] = shard
    return SequenceDatabase(
        path=fasta.absolute(),
        alphabet_name=name,
        sequences=sum(len(shard.names) for shard in shards),
        residues=sum(info.residues for info in infos),
        max_length=max(info.max_length for info in infos),
        shards=tuple(infos),
    )


def release(database: SequenceDatabase) -> None:
    """Free the shards of a database held in memory (makedb without outdir)."""
    for info in database.shards:
        _held.pop(info.sha256, None)


#: Shards of databases held in memory, by their token. The database object stays small: task
#: arguments are serialized even for workers in this process.
IN_MEMORY = "in-memory:"
_held: dict[str, SequenceShard] = {}


def _balance_by_residues(lengths: np.ndarray, shards: int) -> list[np.ndarray]:
    """Each sequence (its file position), in file order, to the shard with the fewest residues so
    far. Streaming-friendly, and within one sequence length of the ideal balance."""
    if shards == 1:
        return [np.arange(len(lengths))]
    lightest = [(0, shard) for shard in range(shards)]  # a heap: (residues, shard), ties to the lower shard
    members: list[list[int]] = [[] for _ in range(shards)]
    for position, length in enumerate(lengths.tolist()):
        load, target = lightest[0]
        members[target].append(position)
        heapq.heapreplace(lightest, (load + max(length, 1), target))
    return [np.array(positions, dtype=np.int64) for positions in members]


def _longest_first(members: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """File positions longest first, ties in file order (`members` are in file order)."""
    return members[np.argsort(-lengths[members], kind="stable")]
