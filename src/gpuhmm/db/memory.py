"""pyhmmer objects given instead of files, as `pyhmmer.hmmsearch` takes them.

Models are `HMM`s (one, any iterable of them, or an open `HMMFile`); sequences are digital:
one `DigitalSequence`, any iterable of them, a `DigitalSequenceBlock` or a `SequenceFile` opened
with `digital=True`. Models and phmmer's queries are searched as they are. Target sequences are
written to a FASTA file that reads back to the same names, descriptions and residues, and the
database is read from it as from a named file, so that searching the objects is searching that
file.
"""

from __future__ import annotations

import os

import pyhmmer.easel
import pyhmmer.plan7

from ..errors import GpuhmmError
from ..hits.text import label, sequence_text
from .fasta import alphabet_name


def is_file(value):
    """Whether `value` names a file (a path, `-` included) rather than being pyhmmer objects."""
    return isinstance(value, (str, os.PathLike))


def name(value, what):
    """How outputs and errors name an input: its path, the path a pyhmmer reader opened, or
    `(WHAT in memory)`."""
    if is_file(value):
        return value
    path = (
        getattr(value, "name", None) if isinstance(value, (pyhmmer.plan7.HMMFile, pyhmmer.easel.SequenceFile)) else None
    )
    return path if isinstance(path, str) else f"({what} in memory)"


def models(value, source):
    """The `HMM`s of `value`, in order, checked as `db.models.read_models` checks a file's."""
    if isinstance(value, pyhmmer.plan7.HMM):
        hmms = [value]
    else:
        try:
            hmms = list(value)
        except TypeError:
            raise GpuhmmError(source, f"not a file, an HMMFile or HMMs, but a {type(value).__name__}") from None
        except (EOFError, ValueError, OSError) as error:
            raise GpuhmmError(source, f"cannot read the models ({error})") from None
    for hmm in hmms:
        if not isinstance(hmm, pyhmmer.plan7.HMM):
            raise GpuhmmError(source, f"holds a {type(hmm).__name__}, not a pyhmmer.plan7.HMM")
    if not hmms:
        raise GpuhmmError(source, "holds no models")
    if any(hmm.alphabet != hmms[0].alphabet for hmm in hmms):
        raise GpuhmmError(source, "models use more than one alphabet")
    return hmms


def sequences(value, source, alphabet=None):
    """The `DigitalSequence`s of `value`, in order, read once; each in `alphabet` where given
    (an Easel alphabet, else the first sequence's)."""
    if isinstance(value, pyhmmer.easel.DigitalSequence):
        value = [value]
    if isinstance(value, pyhmmer.easel.SequenceFile) and not value.digital:
        raise GpuhmmError(source, "a SequenceFile must be opened with digital=True, as pyhmmer.hmmsearch needs")
    try:
        for sequence in value:
            if not isinstance(sequence, pyhmmer.easel.DigitalSequence):
                raise GpuhmmError(
                    source, f"holds a {type(sequence).__name__}, not a DigitalSequence (digitize text sequences)"
                )
            if alphabet is None:
                alphabet = sequence.alphabet
            if sequence.alphabet != alphabet:
                raise GpuhmmError(
                    source,
                    f"alphabet mismatch: sequence {label(sequence)!r} is {_alphabet(sequence.alphabet)}, "
                    f"{_alphabet(alphabet)} is needed",
                )
            yield sequence
    except TypeError:
        raise GpuhmmError(source, f"not a file or digital sequences, but a {type(value).__name__}") from None
    except (EOFError, ValueError, OSError) as error:
        raise GpuhmmError(source, f"cannot read the sequences ({error})") from None


def write_fasta(value, path, source, alphabet=None):
    """Write the sequences of `value` (`sequences`) to `path` as FASTA, refusing what FASTA
    cannot keep: a name that is empty or holds whitespace, a description on several lines or
    starting with whitespace, a gap residue, an accession (FASTA has none)."""
    count = 0
    with open(path, "wb") as handle:
        for sequence in sequences(value, source, alphabet):
            name, accession, description = sequence_text(sequence)
            shown = label(sequence)
            if not name or name.split() != [name]:
                raise GpuhmmError(source, f"sequence name {shown!r} is empty or holds whitespace")
            if description[:1].isspace() or b"\n" in description or b"\r" in description:
                raise GpuhmmError(source, f"sequence {shown!r} has a description on several lines or after whitespace")
            if accession:
                raise GpuhmmError(
                    source, f"sequence {shown!r} has an accession, which gpuhmm keeps from sequence files only"
                )
            residues = sequence.alphabet.decode(sequence.sequence).encode("ascii")
            if b"-" in residues:
                raise GpuhmmError(source, f"sequence {shown!r} holds gaps ('-'); a target sequence is unaligned")
            handle.write(b">" + name + (b" " + description if description else b"") + b"\n" + residues + b"\n")
            count += 1
    if not count:
        raise GpuhmmError(source, "holds no sequences")


def _alphabet(alphabet):
    try:
        return alphabet_name(alphabet)
    except ValueError:
        return repr(alphabet)
