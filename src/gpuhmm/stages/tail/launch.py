"""HMMER 3.4's stages after the Forward filter (`p7_Pipeline` from `p7_ForwardParser` on:
`src/p7_pipeline.c`, `src/p7_domaindef.c`) as batches for `kernels/tail/`: the pairs, models and
host-side terms (`scores`) the kernel reads, its capacities, and the sizes of what it writes.

The kernel runs the whole tail of a pair, from the Forward parser and the exact F3 test to the
scores of the hit and each domain's alignment lines; `readback` turns what it writes into hit
records. A pair whose status is not `OK` goes to pyhmmer.
"""

from __future__ import annotations

import ctypes
import dataclasses

import numpy as np

from .scores import flogsum_table, log_length, null_one

F32 = np.float32
#: Pair outcomes (kernels/tail/common.cuh, `Status`).
OK, RANGE, CAPACITY, UNCERTAIN = range(4)
#: Domains a pair may have before it goes to pyhmmer.
MAX_DOMAINS = 32
#: kernels/tail/domaindef.cuh's capacities.
MAX_SEGMENTS, MAX_TRACE_DOMAINS, MAX_ENVELOPES = 4096, 256, 256


# The structs the kernel reads and writes, field for field as kernels/tail/*.cuh declare them.
_pointer = ctypes.c_void_p


class _Profile(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("M", "Q", "K", "Kp")] + [
        ("rfv", _pointer),
        ("tfv", _pointer),
        ("degenerate", _pointer),
        ("tau", ctypes.c_float),
        ("lam", ctypes.c_float),
    ]


class _Annotation(ctypes.Structure):
    _fields_ = [(n, _pointer) for n in ("consensus_code", "consensus", "rf", "cs", "symbols")]


class _Model(ctypes.Structure):
    _fields_ = [("om", _Profile), ("ann", _Annotation)]


class PairTask(ctypes.Structure):
    _fields_ = [
        ("model", ctypes.c_int),
        ("sequence", ctypes.c_int),
        ("filter_score", ctypes.c_float),
        ("nullsc", ctypes.c_float),
        ("log_length", ctypes.c_double),
    ]


class _Settings(ctypes.Structure):
    _fields_ = [("F3", ctypes.c_double), ("do_null2", ctypes.c_int), ("seed", ctypes.c_uint32), ("flogsum", _pointer)]


class Hit(ctypes.Structure):
    _fields_ = (
        [(n, ctypes.c_int) for n in ("passed", "has_hit", "best_domain")]
        + [(n, ctypes.c_float) for n in ("score", "pre_score", "sum_score")]
        + [(n, ctypes.c_double) for n in ("lnP", "pre_lnP", "sum_lnP")]
    )


class Domain(ctypes.Structure):
    _fields_ = (
        [(n, ctypes.c_int) for n in ("ienv", "jenv", "iali", "jali", "hmmfrom", "hmmto", "N")]
        + [(n, ctypes.c_float) for n in ("envsc", "domcorrection", "dombias", "oasc", "bitscore")]
        + [("lnP", ctypes.c_double), ("text", ctypes.c_uint64)]
    )


class Batch(ctypes.Structure):
    _fields_ = [
        ("models", _pointer),
        ("residues", _pointer),
        ("offsets", _pointer),
        ("lengths", _pointer),
        ("pairs", _pointer),
        ("npairs", ctypes.c_int),
        ("max_domains", ctypes.c_int),
        ("settings", _Settings),
        ("scratch", _pointer),
        ("scratch_bytes", ctypes.c_size_t),
        ("out", _pointer),
        ("out_bytes", ctypes.c_size_t),
        ("status", _pointer),
        ("hits", _pointer),
        ("ndomains", _pointer),
        ("counts", _pointer),
        ("nexpected", _pointer),
    ]


HIT_DTYPE, DOMAIN_DTYPE, PAIR_DTYPE = np.dtype(Hit), np.dtype(Domain), np.dtype(PairTask)


def _aligned(size, alignment=16):
    return (size + alignment - 1) // alignment * alignment


class ModelPack:
    """Striped profiles (`profile.StripedProfile`) in one byte blob, with the table of
    `Model` structs that points into it wherever the blob is placed (`table(base)`)."""

    def __init__(self, profiles):
        pieces, self._fields, used = [], [], 0

        def put(array):
            nonlocal used
            data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
            at = used
            pieces.append(np.pad(data, (0, _aligned(len(data)) - len(data))))
            used += _aligned(len(data))
            return at

        def text(value):
            return None if value is None else put(np.frombuffer(value.encode("ascii") + b"\0", np.uint8))

        for p in profiles:
            abc = p.alphabet
            degenerate = np.zeros((max(1, len(abc.degenerate)), abc.K + 1), dtype=np.uint8)
            for row, members in enumerate(abc.degenerate):
                degenerate[row, : 1 + len(members)] = (len(members), *members)
            codes = np.array([abc.code(c) for c in p.consensus], dtype=np.uint8)
            self._fields.append(
                dict(
                    shape=(p.M, p.Q, abc.K, abc.Kp),
                    tail=(p.tau, p.lam),
                    rfv=put(p.emissions.astype(F32)),
                    tfv=put(p.transitions.astype(F32)),
                    degenerate=put(degenerate),
                    consensus_code=put(codes),
                    consensus=text(p.consensus),
                    rf=text(p.reference),
                    cs=text(p.structure),
                    symbols=text(abc.symbols),
                )
            )
        self.blob = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
        self.profiles = list(profiles)

    def table(self, base):
        """The `Model` structs as bytes, their pointers into the blob placed at address `base`."""

        def at(offset):
            return None if offset is None else base + offset

        models = (_Model * len(self._fields))()
        for model, f in zip(models, self._fields):
            model.om = _Profile(*f["shape"], at(f["rfv"]), at(f["tfv"]), at(f["degenerate"]), *f["tail"])
            model.ann = _Annotation(*(at(f[n]) for n in ("consensus_code", "consensus", "rf", "cs", "symbols")))
        return np.frombuffer(bytes(models), dtype=np.uint8)


def scratch_bytes(L, M, Kp=29):
    """A bound on the scratch one pair takes (kernels/tail: search_target's allocations, then the
    larger of a region's sampling and an envelope's rescoring, with 16-byte alignment); L and M
    may be arrays."""
    L, M = np.asarray(L, np.int64), np.asarray(M, np.int64)
    Q = np.maximum(2, (M - 1) // 4 + 1)
    rows = 16 * (L + 1) * Q
    base = 4 * (6 * (L + 1)) * 2 + 16 * 6 * Q + 4 * (L + 1) * 4 + 24 * MAX_ENVELOPES
    region = 24 * (L + 1) + 3 * rows + 16 * 6 * Q + 8 * L + 4 * Kp + 20 * MAX_SEGMENTS
    region += 24 * MAX_TRACE_DOMAINS + 9 * (3 * (L + 1) + 2 * M + 64) + 40 * MAX_SEGMENTS + 4 * MAX_ENVELOPES
    envelope = 2 * (24 * (L + 1) + 3 * rows) + 16 * 6 * Q + 4 * Kp + 13 * (2 * (L + M) + 16) + 12 * (L + 1)
    return _aligned(base + np.maximum(region, envelope) + 64 * 48 + 65536, 256)


#: Device memory one call's scratch may take: at most this, and at most a quarter of the GPU's;
#: calls a GPU runs at once; threads per CTA.
SCRATCH_BUDGET, CALLS_AT_ONCE, CTA_THREADS = 8 << 30, 2, 64


def largest_first(models, lengths, pair_model, pair_sequence):
    """The pairs' order by decreasing scratch bound, and each pair's bound: batches cut from it
    hold pairs of like size, and the threads of one take the longest pairs first."""
    nodes = np.array([p.M for p in models.profiles], dtype=np.int64)
    bound = scratch_bytes(lengths[pair_sequence], nodes[pair_model])
    order = np.argsort(-bound, kind="stable")
    return order, bound[order]


#: Pairs per call at most, and per thread of the call: a call's outputs stay within a few
#: hundred MB, and a call of large pairs (few threads) stays short.
PAIRS_PER_CALL, PAIRS_PER_THREAD = 32768, 8


def calls(models, lengths, pair_model, pair_sequence, memory_bytes):
    """The pairs, cut into calls of like size (`largest_first`): index arrays into the pairs."""
    order, bounds = largest_first(models, lengths, pair_model, pair_sequence)
    start = 0
    while start < len(order):
        threads = threads_for(len(order), int(bounds[start]), memory_bytes)
        part = order[start : start + min(PAIRS_PER_CALL, PAIRS_PER_THREAD * threads)]
        start += len(part)
        yield part


def threads_for(npairs, scratch, memory_bytes):
    """Threads for a batch of `npairs` pairs of `scratch` bytes each on a GPU of `memory_bytes`."""
    return max(1, min(npairs, min(SCRATCH_BUDGET, memory_bytes // 4) // scratch))


def out_bytes(L, M, lines=6):
    """Output space per pair: MAX_DOMAINS records, then their alignment lines (L, M arrays)."""
    L, M = np.asarray(L, np.int64), np.asarray(M, np.int64)
    return _aligned(DOMAIN_DTYPE.itemsize * MAX_DOMAINS + lines * 4 * (L + M) + 256, 256)


@dataclasses.dataclass
class TailBatch:
    """Pairs of one shard for the tail kernel: `pairs` (PAIR_DTYPE) index `models` (a ModelPack)
    and the sequences (residues, offsets, lengths); `settings` are the pipeline's."""

    models: ModelPack
    residues: np.ndarray
    offsets: np.ndarray  # int64
    lengths: np.ndarray  # int32
    pairs: np.ndarray
    F3: float
    do_null2: bool
    seed: int

    @classmethod
    def build(cls, models, residues, offsets, pair_model, pair_sequence, filter_scores, pipeline, seed):
        lengths = np.diff(offsets).astype(np.int32)
        pairs = np.zeros(len(pair_model), dtype=PAIR_DTYPE)
        pairs["model"], pairs["sequence"], pairs["filter_score"] = pair_model, pair_sequence, filter_scores
        L = lengths[pairs["sequence"]]
        pairs["nullsc"] = [null_one(int(n)) for n in L]
        pairs["log_length"] = [log_length(int(n)) for n in L]
        return cls(
            models,
            residues,
            np.asarray(offsets[:-1], np.int64),
            lengths,
            pairs,
            pipeline["F3"],
            bool(pipeline["do_null2"]),
            seed,
        )

    def bounds(self):
        """(scratch bytes per thread, output bytes per pair) for the largest pair of this batch."""
        L = self.lengths[self.pairs["sequence"]]
        M = np.array([p.M for p in self.models.profiles])[self.pairs["model"]]
        return int(scratch_bytes(L, M).max()), int(out_bytes(L, M).max())

    def inputs(self):
        """The host arrays the kernel reads, by `Batch` field name; `blob` is what `models` (the
        Model structs, `ModelPack.table`) point into."""
        return dict(
            blob=self.models.blob,
            residues=np.ascontiguousarray(self.residues),
            offsets=self.offsets,
            lengths=self.lengths,
            pairs=self.pairs,
            flogsum=flogsum_table(),
        )

    def struct(self, address, npairs, scratch, out):
        """The `Batch` struct, every array at `address(name)` (names as the struct's fields, with
        `flogsum` for the table); `scratch` and `out` are the per-thread and per-pair sizes."""
        settings = _Settings(self.F3, int(self.do_null2), self.seed, address("flogsum"))
        names = ("models", "residues", "offsets", "lengths", "pairs")
        outputs = ("status", "hits", "ndomains", "counts", "nexpected")
        return Batch(
            *(address(n) for n in names),
            npairs,
            MAX_DOMAINS,
            settings,
            address("scratch"),
            scratch,
            address("out"),
            out,
            *(address(n) for n in outputs),
        )


def output_arrays(npairs, out):
    """Empty host arrays of the kernel's per-pair outputs, by `Batch` field name."""
    return dict(
        status=np.zeros(npairs, np.int32),
        hits=np.zeros(npairs, HIT_DTYPE),
        ndomains=np.zeros(npairs, np.int32),
        counts=np.zeros(4 * npairs, np.int32),
        nexpected=np.zeros(npairs, F32),
        out=np.zeros(npairs * out, np.uint8),
    )
