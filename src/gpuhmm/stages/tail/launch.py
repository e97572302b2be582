"""HMMER 3.4's stages after the Forward filter (`p7_Pipeline` from `p7_ForwardParser` on:
`src/p7_pipeline.c`, `src/p7_domaindef.c`) as batches for `kernels/tail/`: the pairs, models and
host-side terms (`scores`) the kernels read, the structs they share (stages.cuh), and the bytes
each stage's items take.

`schedule` runs a batch through the five stages; `readback` turns what they write into hit
records. A pair whose status is not `OK` goes to pyhmmer.
"""

from __future__ import annotations

import ctypes
import dataclasses
import threading
import weakref

import numpy as np

from .scores import flogsum_table, log_length, null_one
from .serialized import NameTable, record_settings

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
        ("ntv", _pointer),
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


class PairState(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("status", "passed", "nregions", "nclustered")] + [
        ("fwdsc", ctypes.c_float),
        ("nexpected", ctypes.c_float),
    ]


class Region(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("pair", "index", "i", "j", "multi")]


class RegionTask(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("pair", "i", "j")] + [(n, ctypes.c_size_t) for n in ("scratch", "bytes")]


class EnvelopeTask(ctypes.Structure):
    _fields_ = [(n, ctypes.c_int) for n in ("pair", "region", "i", "j", "clustered")] + [
        (n, ctypes.c_size_t) for n in ("scratch", "bytes", "text", "text_bytes")
    ]


class Rescored(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("kept", ctypes.c_int), ("domain", Domain)]


#: The `Tail` struct's pointer fields, in order, after the settings.
TAIL_ARRAYS = (
    "space",
    "space_offsets",
    "pair_order",
    "state",
    "regions",
    "nfound",
)
STAGE_ARRAYS = ("arena", "region_tasks", "region_status", "region_envelopes", "envelope_tasks", "rescored", "text")
PAIR_OUTPUTS = ("envelope_first", "region_verdict", "status", "hits", "domains", "ndomains", "counts", "nexpected")
RECORD_ARRAYS = ("model_names", "target_names", "model_name_offsets", "target_name_offsets", "record_settings")


class Tail(ctypes.Structure):
    _fields_ = (
        [(n, _pointer) for n in ("models", "residues", "offsets", "lengths", "pairs")]
        + [("npairs", ctypes.c_int), ("max_domains", ctypes.c_int), ("settings", _Settings)]
        + [(n, _pointer) for n in TAIL_ARRAYS]
        + [("region_capacity", ctypes.c_int), ("nwide", ctypes.c_int), ("ntasks", ctypes.c_int)]
        + [(n, _pointer) for n in STAGE_ARRAYS + PAIR_OUTPUTS + RECORD_ARRAYS]
        + [(n, _pointer) for n in ("record_bytes", "record_offsets", "records", "item_ns")]
    )


HIT_DTYPE, DOMAIN_DTYPE, PAIR_DTYPE = np.dtype(Hit), np.dtype(Domain), np.dtype(PairTask)
STATE_DTYPE, REGION_DTYPE, RESCORED_DTYPE = np.dtype(PairState), np.dtype(Region), np.dtype(Rescored)
REGION_TASK_DTYPE, ENVELOPE_TASK_DTYPE = np.dtype(RegionTask), np.dtype(EnvelopeTask)


def _aligned(size, alignment=16):
    return (size + alignment - 1) // alignment * alignment


class ModelPack:
    """Striped profiles (`profile.StripedProfile`), each packed once into a byte piece of its own
    (kept while the profile lives, so that a device copy of it can stay resident for the search),
    with the table of `Model` structs that points into the pieces wherever they are placed
    (`table(bases)`)."""

    def __init__(self, profiles):
        self.profiles = list(profiles)
        packed = [_packed(p) for p in self.profiles]
        self.pieces = [piece for piece, _ in packed]
        self._fields = [fields for _, fields in packed]
        self.names = NameTable.of(self.profiles)

    def table(self, bases):
        """The `Model` structs as bytes, profile i's pointers into its piece placed at `bases[i]`."""
        models = (_Model * len(self._fields))()
        for model, f, base in zip(models, self._fields, bases):

            def at(offset, base=base):
                return None if offset is None else base + offset

            pointers = (at(f[name]) for name in ("rfv", "tfv", "degenerate", "ntv"))
            model.om = _Profile(*f["shape"], *pointers, *f["tail"])
            model.ann = _Annotation(*(at(f[n]) for n in ("consensus_code", "consensus", "rf", "cs", "symbols")))
        return np.frombuffer(bytes(models), dtype=np.uint8)


_PACKED = {}  # id(profile) → (a weak reference to it, its piece, the fields' offsets)
_PACKED_LOCK = threading.Lock()


def _packed(profile):
    """(piece, fields) of `profile`, packed once and kept while it lives."""
    key = id(profile)

    def forget(reference):
        with _PACKED_LOCK:
            if key in _PACKED and _PACKED[key][0] is reference:
                del _PACKED[key]

    with _PACKED_LOCK:
        entry = _PACKED.get(key)
        if entry is None or entry[0]() is not profile:
            entry = _PACKED[key] = (weakref.ref(profile, forget), *_pack(profile))
    return entry[1], entry[2]


def _pack(p):
    """A profile's arrays and strings in one 16-byte-aligned uint8 piece, and their offsets."""
    pieces, used = [], 0

    def put(array):
        nonlocal used
        data = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
        at = used
        pieces.append(np.pad(data, (0, _aligned(len(data)) - len(data))))
        used += _aligned(len(data))
        return at

    def text(value):
        return None if value is None else put(np.frombuffer(value.encode("ascii") + b"\0", np.uint8))

    abc = p.alphabet
    degenerate = np.zeros((max(1, len(abc.degenerate)), abc.K + 1), dtype=np.uint8)
    for row, members in enumerate(abc.degenerate):
        degenerate[row, : 1 + len(members)] = (len(members), *members)
    codes = np.array([abc.code(c) for c in p.consensus], dtype=np.uint8)
    fields = dict(
        shape=(p.M, p.Q, abc.K, abc.Kp),
        tail=(p.tau, p.lam),
        rfv=put(p.emissions.astype(F32)),
        tfv=put(p.transitions.astype(F32)),
        degenerate=put(degenerate),
        ntv=put(p.transitions.astype(F32).reshape(-1, p.Q, 4).transpose(1, 2, 0)),
        consensus_code=put(codes),
        consensus=text(p.consensus),
        rf=text(p.reference),
        cs=text(p.structure),
        symbols=text(abc.symbols),
    )
    return np.concatenate(pieces), fields


def _a(size):
    return (size + 15) // 16 * 16


def _int64(values):
    """`values` as int64: a numpy or CuPy array stays on its side."""
    return values.astype(np.int64) if hasattr(values, "astype") else np.int64(values)


def _nodes(M):
    M = _int64(M)
    Q = (M - 1) // 4 + 1
    return M, Q + (2 - Q) * (Q < 2)  # p7O_NQF: max(2, ⌈M/4⌉), in arithmetic that CuPy runs too


# The sizes below take int64 arrays, numpy's or CuPy's, and give theirs back.


def space_bytes(L, M):
    """A pair's space from stage 1 to 4 (stages.cuh `pair_space`)."""
    L = _int64(L)
    _, Q = _nodes(M)
    return _aligned(2 * _a(24 * (L + 1)) + _a(96 * Q) + 4 * _a(4 * (L + 1)) + 16, 256)


def region_bytes(Lr, M, Kp=29):
    """A multi-domain region's arena (stage 2: `region_item`'s and region_trace_ensemble's
    allocations, with cluster's at MAX_SEGMENTS segments and 16-byte alignment)."""
    Lr = _int64(Lr)
    M, Q = _nodes(M)
    matrix = _a(24 * (Lr + 1)) + _a(64 * (Lr + 1) * Q)
    sampled_nodes = 8 * Lr
    clustering = 20 * (MAX_SEGMENTS + 1) + 4 * (Lr + M + 2) + 4 * (MAX_ENVELOPES + 1)
    fixed = 24 * MAX_ENVELOPES + 4 * (5 * MAX_SEGMENTS + 1) + 28 * MAX_TRACE_DOMAINS + 4 * Kp
    return _aligned(matrix + 96 * Q + 8 * Lr + sampled_nodes + clustering + fixed + 64 * 16, 256)


def envelope_bytes(Ld, M, Kp=29):
    """An envelope's arena (stage 3: rescore_isolated_domain's allocations)."""
    Ld = _int64(Ld)
    M, Q = _nodes(M)
    matrices = 2 * (_a(24 * (Ld + 1)) + 3 * _a(16 * (Ld + 1) * Q))
    return _aligned(matrices + 96 * Q + 4 * Kp + 13 * (2 * (Ld + M) + 16) + 12 * (Ld + 1) + 64 * 16, 256)


def text_bytes(Ld, M, lines):
    """An envelope's alignment lines: `lines` lines of at most Ld + M columns."""
    return _aligned(_int64(lines) * (_int64(Ld) + _int64(M) + 1))


#: Device memory one launch's region or envelope arenas may take, and at most the GPU's over one
#: more than the calls it runs at once (the rest holds the calls' pairs and outputs).
ARENA_BUDGET = 16 << 30
#: Calls a GPU runs at once, from the threads of a worker that share it.
CALLS_AT_ONCE = 4
#: Threads per item of each kernel (parse, regions, envelopes, assemble, serialize, traces,
#: clusters, the wide parse and envelopes). A pair's parsers and an envelope get 8, the first 4 a
#: lane group, and go 4 to a warp (SAME_MODEL_ITEMS); the longest pairs and envelopes a warp. The regions'
#: Forward, traces and clustering get a warp each so that their divergent serial code does not
#: serialize a warp (its first 4 threads run the regions' Forward as a lane group; all 32 the
#: traces' null2 sums and the link tests); otherwise the first thread works.
THREADS_PER_ITEM = (8, 32, 8, 1, 1, 32, 32, 32, 32)
#: Consecutive items of each kernel that run side by side as one unit: a warp's lane groups on
#: problems of one model, similar in length (schedule.py orders them so), which step through
#: the same rows and read the same model vectors (`benchmarks/tail.py`).
SAME_MODEL_ITEMS = (4, 1, 4, 1, 1, 1, 1, 1, 1)
#: Pairs of at least this many striped cells a lane (target length × Q) run their parsers on a
#: warp each, beside the others (kernels/tail/wide.cuh): their serial chains would outlast them.
WIDE_PAIR_CELLS = 50_000
#: Envelopes of at least this many striped cells a lane (their residues × Q) are rescored on a
#: warp each, beside the others.
WIDE_ENVELOPE_CELLS = 25_000
#: Pairs per call at most: a call's outputs stay within a few hundred MB.
PAIRS_PER_CALL = 65536


@dataclasses.dataclass
class TailBatch:
    """Pairs of one shard for the tail kernel: `pairs` (PAIR_DTYPE) index `models` (a ModelPack)
    and the sequences (residues, offsets, lengths); `settings` are the pipeline's."""

    models: ModelPack
    residues: np.ndarray
    offsets: np.ndarray  # int64
    lengths: np.ndarray  # int32
    names: NameTable  # the sequences'
    pairs: np.ndarray
    pipelines: list  # each model's TopHits pipeline settings
    seed: int

    @classmethod
    def build(cls, models, sequences, pair_model, pair_sequence, filter_scores, pipelines, seed):
        """`sequences` are (residues, offsets, names): every sequence's digital residues end to
        end, where each starts (one more offset than sequences), and their `serialized.NameTable`."""
        residues, offsets, names = sequences
        lengths = np.diff(offsets).astype(np.int32)
        pairs = np.zeros(len(pair_model), dtype=PAIR_DTYPE)
        pairs["model"], pairs["sequence"], pairs["filter_score"] = pair_model, pair_sequence, filter_scores
        L, length_of = np.unique(lengths[pairs["sequence"]], return_inverse=True)
        pairs["nullsc"] = np.array([null_one(int(n)) for n in L], F32)[length_of]
        pairs["log_length"] = np.array([log_length(int(n)) for n in L], np.float64)[length_of]
        return cls(models, residues, np.asarray(offsets[:-1], np.int64), lengths, names, pairs, pipelines, seed)

    def nodes(self):
        """Each pair's model length M."""
        return np.array([p.M for p in self.models.profiles], np.int64)[self.pairs["model"]]

    def pair_lengths(self):
        """Each pair's target length L."""
        return self.lengths[self.pairs["sequence"]].astype(np.int64)

    def lines(self):
        """Each pair's alignment lines per domain: 4, and the model's RF and CS lines."""
        each = [4 + (p.reference is not None) + (p.structure is not None) for p in self.models.profiles]
        return np.array(each, np.int64)[self.pairs["model"]]

    def inputs(self):
        """The host arrays the kernels read, by `Tail` field name (the models' pieces apart,
        `ModelPack.table`); `flogsum` is what the settings point at."""
        return dict(
            residues=np.ascontiguousarray(self.residues),
            offsets=self.offsets,
            lengths=self.lengths,
            pairs=self.pairs,
            flogsum=flogsum_table(),
            model_names=self.models.names.blob,
            model_name_offsets=self.models.names.offsets,
            target_names=self.names.blob,
            target_name_offsets=self.names.offsets,
            record_settings=np.frombuffer(b"".join(bytes(record_settings(p)) for p in self.pipelines), np.uint8),
        )

    def settings(self, flogsum):
        """The kernels' PipelineSettings, the FLogsum table at address `flogsum`."""
        pipeline = self.pipelines[0]
        return _Settings(pipeline["F3"], int(bool(pipeline["do_null2"])), self.seed, flogsum)


#: The per-pair outputs of stage 4, by `Tail` field name (domains: MAX_DOMAINS per pair).
OUTPUT_DTYPES = dict(
    status=np.int32, hits=HIT_DTYPE, domains=DOMAIN_DTYPE, ndomains=np.int32, counts=np.int32, nexpected=F32
)


def output_bytes(npairs):
    """The bytes of each of stage 4's outputs for `npairs` pairs."""
    counts = dict(domains=npairs * MAX_DOMAINS, counts=4 * npairs)
    return {name: counts.get(name, npairs) * np.dtype(dtype).itemsize for name, dtype in OUTPUT_DTYPES.items()}
