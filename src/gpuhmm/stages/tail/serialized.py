"""The host side of the hit records the tail's kernel code writes (`kernels/tail/serialize.cuh`):
HMMER 3.4's `p7_hit_Serialize` buffers, byte for byte what `hits.records.encode_hit` writes.

`NameTable` packs the models' and the targets' names for upload, and `RecordSettings` mirrors
the kernel's struct; `records.tophits_of_buffers` makes a pyhmmer TopHits of the written
records without decoding them.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...hits.text import sequence_text

_NAMES = ("name", "accession", "description")


# The struct of kernels/tail/serialize.cuh, field for field.
class RecordSettings(ctypes.Structure):
    _fields_ = [("inc_by_E", ctypes.c_int), ("use_bit_cutoffs", ctypes.c_int)] + [
        (name, ctypes.c_double) for name in ("T", "incT", "domT", "incdomT")
    ]


def take_ranges(values, offsets, indices):
    """Ranges `indices` of `values` (range i: values[offsets[i]:offsets[i + 1]]) end to end, and
    where each starts (int64, one more than the ranges)."""
    starts, sizes = offsets[indices], offsets[np.asarray(indices) + 1] - offsets[indices]
    taken = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=taken[1:])
    return values[np.repeat(starts - taken[:-1], sizes) + np.arange(taken[-1])], taken


class NameTable:
    """Byte strings in one uint8 `blob` for upload: string i is `blob[offsets[i]:offsets[i + 1]]`
    (`offsets`: int64, one more than the strings)."""

    def __init__(self, strings=(), blob=None, offsets=None):
        if blob is None:
            strings = [bytes(s) for s in strings]
            offsets = np.zeros(len(strings) + 1, np.int64)
            offsets[1:] = np.cumsum([len(s) for s in strings], dtype=np.int64)
            blob = np.frombuffer(bytearray(b"".join(strings)), np.uint8)
        self.blob, self.offsets = blob, offsets

    def take(self, indices):
        """The table of strings `indices`, in that order."""
        return NameTable(None, *take_ranges(self.blob, self.offsets, indices))

    @classmethod
    def joined(cls, tables):
        """The strings of `tables`, one table after another."""
        sizes = [np.diff(t.offsets) for t in tables]
        offsets = np.zeros(sum(len(s) for s in sizes) + 1, np.int64)
        np.cumsum(np.concatenate(sizes + [np.zeros(0, np.int64)]), out=offsets[1:])
        return cls(None, np.concatenate([t.blob for t in tables] + [np.zeros(0, np.uint8)]), offsets)

    @classmethod
    def of(cls, items):
        """The names of models (`profile.StripedProfile`) or targets (the same three fields): three
        strings each, name, accession and description (b"" where unset), as `table_names` reads."""
        return cls(getattr(item, name) or b"" for item in items for name in _NAMES)

    @classmethod
    def of_sequences(cls, sequences):
        """The names of pyhmmer sequences, as `of` reads them from targets."""
        return cls(text for sequence in sequences for text in sequence_text(sequence))

    def __getitem__(self, i):
        return self.blob[self.offsets[i] : self.offsets[i + 1]].tobytes()

    @property
    def nbytes(self):
        return self.blob.nbytes + self.offsets.nbytes


def record_settings(pipeline):
    """The `RecordSettings` of a TopHits pipeline dict (`records.pipeline_settings`)."""
    thresholds = (float(pipeline[name]) for name in ("T", "incT", "domT", "incdomT"))
    return RecordSettings(int(bool(pipeline["inc_by_E"])), int(bool(pipeline["use_bit_cutoffs"])), *thresholds)
