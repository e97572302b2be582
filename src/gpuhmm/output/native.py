"""HMMER's own writers, called through ctypes on pyhmmer's hits, off the interpreter lock.

pyhmmer links HMMER as a shared library (`liblibhmmer`), which exports the functions hmmsearch
prints with: `p7_tophits_Targets` and `p7_tophits_Domains` (the `-o` report's hit list, domain
tables and alignments) and `p7_tophits_TabularTargets`, `TabularDomains`, `TabularXfam` (the
three tables, as pyhmmer's `TopHits.write` calls them). A ctypes call releases the GIL, so
threads format the queries' hits side by side, and the bytes are hmmsearch's by construction.

A pyhmmer `TopHits` (pinned pyhmmer 0.12.3) keeps its `P7_TOPHITS *` and a copy of its
`P7_PIPELINE` in the object, after the object header and Cython's method table, in the order
`plan7.pxd` declares them: `_pli`, `_th`, `_query`, `_empty`. `located` reads the two only
where that layout shows (the object's size, `_query` at its place, the pipeline's fields equal
to the values pyhmmer reports); elsewhere the callers use the Python writers.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import weakref
from ctypes import c_char, c_char_p, c_double, c_int, c_size_t, c_uint64, c_void_p
from pathlib import Path

import pyhmmer
from pyhmmer.plan7 import TopHits


class Pipeline(ctypes.Structure):
    """HMMER 3.4's `P7_PIPELINE` (`hmmer.h`), as the copy a `TopHits` holds."""

    _fields_ = [
        *((name, c_void_p) for name in ("oxf", "oxb", "fwd", "bck", "r")),
        ("do_reseeding", c_int),
        ("do_alignment_score_calc", c_int),
        ("ddef", c_void_p),
        ("by_E", c_int),
        ("E", c_double),
        ("T", c_double),
        ("dom_by_E", c_int),
        ("domE", c_double),
        ("domT", c_double),
        ("use_bit_cutoffs", c_int),
        ("inc_by_E", c_int),
        ("incE", c_double),
        ("incT", c_double),
        ("incdom_by_E", c_int),
        ("incdomE", c_double),
        ("incdomT", c_double),
        ("Z", c_double),
        ("domZ", c_double),
        ("Z_setby", c_int),
        ("domZ_setby", c_int),
        ("do_max", c_int),
        ("F1", c_double),
        ("F2", c_double),
        ("F3", c_double),
        ("B1", c_int),
        ("B2", c_int),
        ("B3", c_int),
        ("do_biasfilter", c_int),
        ("do_null2", c_int),
        *(
            (name, c_uint64)
            for name in (
                *("nmodels", "nseqs", "nres", "nnodes"),
                *("n_past_msv", "n_past_bias", "n_past_vit", "n_past_fwd", "n_output"),
                *("pos_past_msv", "pos_past_bias", "pos_past_vit", "pos_past_fwd", "pos_output"),
            )
        ),
        ("mode", c_int),
        ("long_targets", c_int),
        ("strands", c_int),
        ("W", c_int),
        ("block_length", c_int),
        ("show_accessions", c_int),
        ("show_alignments", c_int),
        ("hfp", c_void_p),
        ("errbuf", c_char * 128),  # eslERRBUFSIZE
    ]

    def __getitem__(self, name):
        """A field by name, as the pipeline of a TopHits' pickled state gives it."""
        return getattr(self, name)


class _TopHitsList(ctypes.Structure):
    """The head of HMMER's `P7_TOPHITS`."""

    _fields_ = [("hit", c_void_p), ("unsrt", c_void_p), ("Nalloc", c_uint64), ("N", c_uint64), ("nreported", c_uint64)]


_POINTER = ctypes.sizeof(c_void_p)
#: Where a TopHits object keeps its fields: after the object header (reference count, type) and
#: Cython's method table.
_PIPELINE_AT = 3 * _POINTER
_TOPHITS_AT = _PIPELINE_AT + ctypes.sizeof(Pipeline)
_QUERY_AT = _TOPHITS_AT + _POINTER
_OBJECT_SIZE = _QUERY_AT + 2 * _POINTER  # `_empty`, an int padded to a pointer's width

#: Pipeline fields that pyhmmer reports, by the TopHits property that reads each.
_REPORTED = {
    "Z": "Z",
    "domZ": "domZ",
    "E": "E",
    "domE": "domE",
    "incE": "incE",
    "incdomE": "incdomE",
    "nmodels": "searched_models",
    "nnodes": "searched_nodes",
    "nseqs": "searched_sequences",
    "nres": "searched_residues",
    "long_targets": "long_targets",
}
_MODES = {"search": 0, "scan": 1}  # p7_SEARCH_SEQS, p7_SCAN_MODELS


#: The C functions used here: (name, result, arguments); `None` a `Pipeline` pointer.
_HMMER = [
    ("p7_tophits_Targets", c_int, [c_void_p, c_void_p, None, c_int]),
    ("p7_tophits_Domains", c_int, [c_void_p, c_void_p, None, c_int]),
    ("p7_tophits_TabularTargets", c_int, [c_void_p, c_char_p, c_char_p, c_void_p, None, c_int]),
    ("p7_tophits_TabularDomains", c_int, [c_void_p, c_char_p, c_char_p, c_void_p, None, c_int]),
    ("p7_tophits_TabularXfam", c_int, [c_void_p, c_char_p, c_char_p, c_void_p, None]),
]
_LIBC = [
    ("open_memstream", c_void_p, [ctypes.POINTER(c_void_p), ctypes.POINTER(c_size_t)]),
    ("fwrite", c_size_t, [c_char_p, c_size_t, c_size_t, c_void_p]),
    ("fclose", c_int, [c_void_p]),
    ("free", None, [c_void_p]),
]


@functools.cache
def _libraries():
    """(HMMER, the C library) with the functions used here declared, or None where pyhmmer's
    HMMER library is not a file of its own, or a TopHits not of the layout above (CPython's:
    an object's `id` is its address)."""
    if platform.python_implementation() != "CPython" or TopHits.__basicsize__ != _OBJECT_SIZE:
        return None
    package = Path(pyhmmer.__file__).parent
    found = sorted(
        path
        for folder in (package.parent / "pyhmmer.libs", package / ".dylibs")
        for path in folder.glob("liblibhmmer*")
        if path.suffix in (".so", ".dylib") or ".so." in path.name
    )
    try:
        libraries = ctypes.CDLL(str(found[0])), ctypes.CDLL(None)
        for library, functions in zip(libraries, (_HMMER, _LIBC)):
            for name, result, arguments in functions:
                function = getattr(library, name)
                function.restype = result
                function.argtypes = [ctypes.POINTER(Pipeline) if kind is None else kind for kind in arguments]
    except (IndexError, OSError, AttributeError):
        return None
    return libraries


def available():
    """Whether HMMER's writers can be called here."""
    return _libraries() is not None


def located(hits):
    """(the `P7_TOPHITS` address, a copy of the `P7_PIPELINE`) of a pyhmmer TopHits, or None
    where the object does not show the layout this module reads."""
    if type(hits) is not TopHits or _libraries() is None:
        return None
    address = id(hits)
    if c_void_p.from_address(address + _QUERY_AT).value != id(hits.query):
        return None
    pipeline = Pipeline.from_buffer_copy(ctypes.string_at(address + _PIPELINE_AT, ctypes.sizeof(Pipeline)))
    if any(getattr(pipeline, field) != getattr(hits, name) for field, name in _REPORTED.items()):
        return None
    if pipeline.mode != _MODES.get(hits.mode):
        return None
    tophits = c_void_p.from_address(address + _TOPHITS_AT).value
    if not tophits:
        return None
    head = _TopHitsList.from_address(tophits)
    if head.N != len(hits) or head.nreported != len(hits.reported) or (head.N and not head.hit):
        return None
    return tophits, pipeline


class Stream:
    """A C stream into memory (`open_memstream`) that HMMER's writers and `write` fill. Once
    the `with` block closes it, `value` holds its bytes where the stream left them (a ctypes
    array, freed with it), so that they are written out without a copy."""

    def __enter__(self):
        self._libc = _libraries()[1]
        self._buffer, self._size = c_void_p(), c_size_t()
        self.file = self._libc.open_memstream(ctypes.byref(self._buffer), ctypes.byref(self._size))
        if not self.file:
            raise MemoryError("open_memstream failed")
        return self

    def write(self, data):
        if data and self._libc.fwrite(data, 1, len(data), self.file) != len(data):
            raise MemoryError("writing to a memory stream failed")

    def __exit__(self, kind, error, trace):
        if self._libc.fclose(self.file) or not self._buffer.value:
            self._libc.free(self._buffer)
            if kind is None:  # an error of the block itself goes on as it is
                raise MemoryError("closing a memory stream failed")
            return
        self.value = (c_char * self._size.value).from_address(self._buffer.value)
        weakref.finalize(self.value, self._libc.free, self._buffer.value)


class _Buffer:
    """A `Stream` in Python, for the Python writers where HMMER's cannot be called."""

    def __enter__(self):
        self._parts = []
        return self

    def write(self, data):
        self._parts.append(data)

    def __exit__(self, *failure):
        self.value = b"".join(self._parts)


def stream(use_native=True):
    """A memory stream: a C one (`Stream`) that HMMER's writers can fill, where they are
    `available` and `use_native` is true; else one only Python writes to."""
    return Stream() if use_native and available() else _Buffer()


def _checked(status, function):
    if status != 0:
        raise MemoryError(f"{function} failed (HMMER status {status})")


def write_hit_lists(stream, place, textw, accessions, alignments):
    """hmmsearch's target list, then its domain annotation (with alignments unless
    `alignments` is false), each followed by a blank line as the programs' `main` writes them.
    `place` is what `located` gave."""
    hmmer = _libraries()[0]
    tophits, pipeline = place[0], Pipeline.from_buffer_copy(place[1])
    pipeline.show_accessions, pipeline.show_alignments = int(accessions), int(alignments)
    _checked(hmmer.p7_tophits_Targets(stream.file, tophits, ctypes.byref(pipeline), textw), "p7_tophits_Targets")
    stream.write(b"\n\n")
    _checked(hmmer.p7_tophits_Domains(stream.file, tophits, ctypes.byref(pipeline), textw), "p7_tophits_Domains")
    stream.write(b"\n\n")


def write_table(stream, place, format, header, query_name, query_accession):
    """One query's rows of a table, as pyhmmer's `TopHits.write(format=...)` writes them:
    "targets" (`--tblout`), "domains" (`--domtblout`) or "pfam" (`--pfamtblout`, whose
    header comes with every query)."""
    hmmer = _libraries()[0]
    tophits, pipeline = place
    arguments = (stream.file, query_name, query_accession, tophits, ctypes.byref(pipeline))
    if format == "targets":
        _checked(hmmer.p7_tophits_TabularTargets(*arguments, int(header)), "p7_tophits_TabularTargets")
    elif format == "domains":
        _checked(hmmer.p7_tophits_TabularDomains(*arguments, int(header)), "p7_tophits_TabularDomains")
    else:
        _checked(hmmer.p7_tophits_TabularXfam(*arguments), "p7_tophits_TabularXfam")
