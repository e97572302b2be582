"""The host side of the hit records the tail's kernel code writes (`kernels/tail/serialize.cuh`):
HMMER 3.4's `p7_hit_Serialize` buffers, byte for byte what `hits.records.encode_hit` writes.

`NameTable` packs the models' and the targets' names for upload, and `Names` and
`RecordSettings` mirror the kernel's structs; `records.tophits_of_buffers` makes a pyhmmer
TopHits of the written records without decoding them.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...hits.text import sequence_text

_NAMES = ("name", "accession", "description")


# The structs of kernels/tail/serialize.cuh, field for field.
class Text(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_void_p), ("length", ctypes.c_size_t)]


class Names(ctypes.Structure):
    _fields_ = [(f"{owner}_{name}", Text) for owner in ("model", "target") for name in _NAMES]


class RecordSettings(ctypes.Structure):
    _fields_ = [("inc_by_E", ctypes.c_int), ("use_bit_cutoffs", ctypes.c_int)] + [
        (name, ctypes.c_double) for name in ("T", "incT", "domT", "incdomT")
    ]


class NameTable:
    """Byte strings in one uint8 `blob` for upload: string i is `blob[offsets[i]:offsets[i + 1]]`
    (`offsets`: int64, one more than the strings)."""

    def __init__(self, strings):
        strings = [bytes(s) for s in strings]
        self.offsets = np.zeros(len(strings) + 1, np.int64)
        self.offsets[1:] = np.cumsum([len(s) for s in strings], dtype=np.int64)
        self.blob = np.frombuffer(bytearray(b"".join(strings)), np.uint8)

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


def record_settings(pipeline):
    """The `RecordSettings` of a TopHits pipeline dict (`records.pipeline_settings`)."""
    thresholds = (float(pipeline[name]) for name in ("T", "incT", "domT", "incdomT"))
    return RecordSettings(int(bool(pipeline["inc_by_E"])), int(bool(pipeline["use_bit_cutoffs"])), *thresholds)
