"""The tail's sampling headers (kernels/tail/stotrace.cuh, spensemble.cuh), built for the host,
against the numpy reference (tests/oracle/stotrace.py, spensemble.py), exactly: the
generator's draws, FNorm and FChoose, 200 stochastic traces of real multi-domain regions (every
step, and the generator's state after), and the clustering of their sampled domains and of
synthetic segment sets into envelopes (every field, in order)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gpuhmm.stages.tail.profile import F32

from helpers import tail_build
from helpers.tail import striped_profiles
from oracle import domaindef, fwdback
from oracle.oprofile import special_transitions
from oracle.pipeline import forward_parser, target_domains
from oracle.spensemble import Segments, cluster
from oracle.stotrace import FastRandomness, _Sampler, choose, normalized, stochastic_trace
from oracle.target import Target

SHIM = r"""
#include <cstdlib>
#include <vector>
#include "domaindef.cuh"
using namespace gpuhmm::tail;

// A sample_trace sink that keeps the sampled path in a Trace.
struct TraceSink {
    Trace *tr;
    int append(char previous, char state, int k, int i, Node) { return trace_append(tr, previous, state, k, i, 0.0f); }
};

// The full matrix `fwd`'s rows as the sampler reads them (domaindef.cuh's CellRows).
std::vector<f4> cells_of(const Matrix *fwd) {
    std::vector<f4> cells(4 * (size_t)(fwd->L + 1) * fwd->Q);
    for (int i = 0; i <= fwd->L; i++)
        for (int z = 0; z < 4; z++)
            CellRows{cells.data(), fwd->Q}(i, z, fwd->M + (size_t)i * fwd->Q, fwd->D + (size_t)i * fwd->Q,
                                           fwd->I + (size_t)i * fwd->Q);
    return cells;
}

// p7_StochasticTrace: the sampled path into `tr` (emptied first; no posteriors), reversed.
int stochastic_trace(Randomness *r, const Profile *om, const SpecialTransitions *xf, const Matrix *fwd, Trace *tr) {
    TraceSink sink = {tr};
    tr->n = 0;
    std::vector<f4> cells = cells_of(fwd);
    int status = sample_trace(r, sto_sampler(om, xf, fwd, cells.data()), sink);
    if (status == TAIL_OK) trace_reverse(tr);
    return status;
}

template <int N>
int fnorm_fchoose_n(float *path, Randomness *r) {
    vec_fnorm<N>(path);
    return rnd_fchoose<N>(r, path);
}

extern "C" {

// n draws after init, then n after reseed; the final state into *state.
void rng_draws(unsigned seed, int n, double *out, unsigned *state) {
    Randomness r;
    rng_init(&r, seed);
    for (int z = 0; z < n; z++) out[z] = rng_random(&r);
    rng_reseed(&r);
    for (int z = 0; z < n; z++) out[n + z] = rng_random(&r);
    *state = r.x;
}

// FNorm of the n (2 to 4) weights of `path` in place, then FChoose from generator state *x (updated).
int fnorm_fchoose(float *path, int n, unsigned seed, unsigned *x) {
    Randomness r;
    r.seed = seed;
    r.x = *x;
    int chosen = n == 2   ? fnorm_fchoose_n<2>(path, &r)
                 : n == 3 ? fnorm_fchoose_n<3>(path, &r)
                          : fnorm_fchoose_n<4>(path, &r);
    *x = r.x;
    return chosen;
}

// sto_select_e on a one-row matrix (row 0: Q vectors of M and D, E) from generator state *x.
int select_e_row(int Q, const float *M, const float *D, float E, int *k, unsigned *x) {
    float xmx[X_COUNT] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    xmx[X_E] = E;
    std::vector<f4> cells(4 * (size_t)Q);
    CellRows rows = {cells.data(), Q};
    for (int z = 0; z < 4; z++) rows(0, z, (const f4 *)M, (const f4 *)D, (const f4 *)D);
    StoSampler s;
    s.L = 0;
    s.Q = Q;
    s.xmx = xmx;
    s.cells = cells.data();
    s.ntv = 0;
    Randomness r;
    r.seed = 1;
    r.x = *x;
    Node n;
    int state = sto_select_e(s, &r, 0, k, &n);
    if (state && (n.q != (*k - 1) % Q || n.z != (*k - 1) / Q)) return -1;
    *x = r.x;
    return state;
}

// `ntraces` consecutive traces from one reseeded generator, trace t at t * capacity.
int sample_traces(unsigned seed, const Profile *om, const SpecialTransitions *xf, const Matrix *fwd, int ntraces,
                  int capacity, char *st, int *k, int *i, int *lengths, unsigned *state) {
    Randomness r;
    rng_init(&r, seed);
    rng_reseed(&r);
    for (int t = 0; t < ntraces; t++) {
        Trace tr;
        tr.n = 0;
        tr.capacity = capacity;
        tr.st = st + (size_t)t * capacity;
        tr.k = k + (size_t)t * capacity;
        tr.i = i + (size_t)t * capacity;
        tr.pp = 0;
        int status = stochastic_trace(&r, om, xf, fwd, &tr);
        if (status != TAIL_OK) return status;
        lengths[t] = tr.n;
    }
    *state = r.x;
    return TAIL_OK;
}

int cluster_segments(const int *sample, const int *i, const int *j, const int *k, const int *m, int n, int nsamples,
                     long scratch_bytes, Envelope *out, int capacity, int *count, long *used_after) {
    Arena arena;
    arena.base = (char *)malloc(scratch_bytes > 0 ? scratch_bytes : 1);
    arena.used = 0;
    arena.capacity = scratch_bytes;
    arena.overflow = 0;
    int status = cluster(this_warp(), sample, i, j, k, m, n, nsamples, &arena, out, capacity, count);
    *used_after = (long)arena.used;
    free(arena.base);
    return status;
}
}
"""

TAIL_OK, TAIL_RANGE, TAIL_CAPACITY = 0, 1, 2
NSAMPLES = domaindef.NSAMPLES
SEED = 42
#: Multi-domain cases of test_domains (model, target index), with short regions.
CASES = (("HTH_3", 226), ("Radical_SAM", 323), ("GTP_EFTU", 176), ("BPD_transp_1", 277))
_INT = ctypes.POINTER(ctypes.c_int)


class Envelope(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in ("i", "j", "k", "m", "cluster")] + [("prob", ctypes.c_float)]


@pytest.fixture(scope="module")
def lib():
    library = tail_build.build(SHIM)
    library.rng_draws.argtypes = [ctypes.c_uint, ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint)]
    library.fnorm_fchoose.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint)]
    library.select_e_row.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float, _INT]
    library.select_e_row.argtypes += [ctypes.POINTER(ctypes.c_uint)]
    library.sample_traces.argtypes = [ctypes.c_uint, *[ctypes.c_void_p] * 3, ctypes.c_int, ctypes.c_int]
    library.sample_traces.argtypes += [ctypes.c_void_p] * 4 + [ctypes.POINTER(ctypes.c_uint)]
    library.cluster_segments.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int, ctypes.c_int, ctypes.c_long]
    library.cluster_segments.argtypes += [ctypes.c_void_p, ctypes.c_int, _INT, ctypes.POINTER(ctypes.c_long)]
    return library


@pytest.fixture(scope="module")
def regions(pfam_test_data):
    """Per case: the profile, its target, and the multi-domain regions (i, j) the reference's
    domain definition samples (found by watching `region_trace_ensemble`)."""
    hmms, sequences = pfam_test_data
    names = {name for name, _ in CASES}
    profiles = striped_profiles([hmm for hmm in hmms if hmm.name in names])
    found = {}
    original = domaindef.region_trace_ensemble

    def watch(profile, target, xf, i, j, rng, null2_scores):
        found[current].append((i, j))
        return original(profile, target, xf, i, j, rng, null2_scores)

    domaindef.region_trace_ensemble = watch
    try:
        for current in CASES:
            found[current] = []
            target = Target.from_digital(sequences[current[1]])
            fwd, _ = forward_parser(profiles[current[0]], target)
            target_domains(profiles[current[0]], target, fwd)
    finally:
        domaindef.region_trace_ensemble = original
    return {case: (profiles[case[0]], Target.from_digital(sequences[case[1]]), found[case]) for case in CASES}


def _region_matrix(profile, target, i, j):
    """The region's full multihit Forward matrix, for the whole target's length (as
    region_trace_ensemble computes it) and its special transitions."""
    xf = special_transitions(len(target.residues), multihit=True)
    fwd, _ = fwdback.forward(profile, target.residues[i - 1 : j], xf, full=True)
    return xf, fwd


def _c_traces(lib, profile, xf, fwd, ntraces, capacity, seed=SEED):
    st = np.zeros((ntraces, capacity), dtype=np.uint8)
    k = np.zeros((ntraces, capacity), dtype=np.int32)
    i = np.zeros((ntraces, capacity), dtype=np.int32)
    lengths = np.zeros(ntraces, dtype=np.int32)
    state = ctypes.c_uint(0)
    om, cxf, matrix = (
        tail_build.Profile.from_striped(profile),
        tail_build.SpecialTransitions.from_reference(xf),
        tail_build.Matrix.from_reference(fwd),
    )
    args = [ctypes.byref(om), ctypes.byref(cxf), ctypes.byref(matrix), ntraces, capacity]
    args += [a.ctypes.data for a in (st, k, i, lengths)]
    status = lib.sample_traces(seed, *args, ctypes.byref(state))
    traces = [(st[t, :n].tobytes().decode(), k[t, :n].tolist(), i[t, :n].tolist()) for t, n in enumerate(lengths)]
    return status, traces, state.value


def _c_cluster(lib, segments, nsamples, scratch_bytes=1 << 20, capacity=64):
    columns = [np.ascontiguousarray(c, dtype=np.int32) for c in segments]
    out = (Envelope * max(1, capacity))()
    count, used = ctypes.c_int(-1), ctypes.c_long(-1)
    n = len(columns[0])
    args = [c.ctypes.data for c in columns] + [n, nsamples, scratch_bytes, out, capacity]
    status = lib.cluster_segments(*args, ctypes.byref(count), ctypes.byref(used))
    assert used.value == 0  # the scratch is given back
    envelopes = [(e.i, e.j, e.k, e.m, e.cluster, F32(e.prob)) for e in out[: count.value]]
    return status, envelopes


def _reference_cluster(segments, nsamples):
    made = Segments(*(np.asarray(c, dtype=np.int64) for c in segments))
    return [(e.i, e.j, e.k, e.m, e.cluster, e.prob) for e in cluster(made, nsamples)]


def _assert_envelopes_equal(ours, expected):
    assert len(ours) == len(expected)
    for a, b in zip(ours, expected):
        assert a[:5] == b[:5]
        assert a[5].tobytes() == F32(b[5]).tobytes()


def test_generator_draws(lib):
    n = 3000
    for seed in (42, 1, 7, 12345, 0xFFFFFFFF, 2**31 + 17):
        out = np.zeros(2 * n, dtype=np.float64)
        state = ctypes.c_uint(0)
        lib.rng_draws(seed, n, out.ctypes.data, ctypes.byref(state))
        rng = FastRandomness(seed)
        expected = [rng.random() for _ in range(n)]
        rng.reseed()
        expected += [rng.random() for _ in range(n)]
        assert out.tobytes() == np.array(expected, dtype=np.float64).tobytes(), seed
        assert state.value == rng.x, seed
        assert len(set(expected)) == n and expected[:n] == expected[n:]  # real draws; reseed restarts


def test_fnorm_and_fchoose(lib):
    generator = np.random.default_rng(3)
    tiny = np.array([1e-45, 3e-42, 1.17e-38], dtype=F32)  # subnormals and the smallest normal
    cases = [np.zeros(4, F32), np.zeros(2, F32), np.array([0.0, 1e-45], F32), tiny]
    cases += [(generator.random(n) * 10.0 ** generator.integers(-40, 5)).astype(F32) for n in (2, 4) * 50]
    cases += [np.where(generator.random(4) < 0.5, 0.0, generator.random(4)).astype(F32) for _ in range(50)]
    rng = FastRandomness(11)
    chosen = []
    for path in cases:
        assert path.dtype == F32
        expected = normalized(list(path))
        x = ctypes.c_uint(rng.x)
        ours = np.ascontiguousarray(path, dtype=F32)
        index = lib.fnorm_fchoose(ours.ctypes.data, len(ours), 11, ctypes.byref(x))
        assert ours.tobytes() == np.array(expected, dtype=F32).tobytes(), path
        assert index == choose(rng, expected), path
        assert x.value == rng.x
        chosen.append(index)
    assert len(set(chosen)) == 4


def _next_draw(x):
    return ((x * 69069 + 1) & 0xFFFFFFFF) / 4294967296.0


def test_fchoose_sums_in_double(lib):
    """Two-weight paths whose draw falls between the double ratio FChoose computes and the ratio
    with a float32 total: only the double sums choose as the reference does."""
    rng = FastRandomness(5)
    discriminating = 0
    for _ in range(300):
        roll = _next_draw(rng.x)
        a = np.nextafter(F32(roll), F32(1.0), dtype=F32)
        for n in range(-20, 20):
            path = [a, F32(F32(1.0 - roll) * F32(1.0 + n * 1e-7))]
            weights = normalized(path)
            total = F32(0.0)
            for w in weights:
                total = F32(float(total) + float(w))
            if (roll < float(weights[0]) / (float(weights[0]) + float(weights[1]))) != (
                roll < float(weights[0]) / float(total)
            ):
                break
        else:
            rng.random()
            continue
        x = ctypes.c_uint(rng.x)
        ours = np.array(path, dtype=F32)
        index = lib.fnorm_fchoose(ours.ctypes.data, 2, 5, ctypes.byref(x))
        assert index == choose(rng, weights)
        assert x.value == rng.x
        discriminating += 1
    assert discriminating >= 50


class _Q:
    def __init__(self, Q):
        self.Q = Q


def _select_e(lib, x, M, D, E):
    """(state, k, generator state after) from the header and from the reference."""
    Q = M.shape[0]
    M, D = np.ascontiguousarray(M, dtype=F32), np.ascontiguousarray(D, dtype=F32)
    k, state = ctypes.c_int(-1), ctypes.c_uint(x)
    st = lib.select_e_row(Q, M.ctypes.data, D.ctypes.data, E, ctypes.byref(k), ctypes.byref(state))
    ours = (chr(st) if st else None, k.value, state.value)
    specials = np.zeros((1, 6), dtype=F32)
    specials[0, fwdback.E] = E
    fwd = fwdback.DPMatrix(specials, M[None], D[None], None, False)
    rng = FastRandomness(1)
    rng.x = x
    expected = _Sampler(rng, _Q(Q), None, fwd).e(0) + (rng.x,) if st else None
    return ours, expected


def test_select_e(lib):
    generator = np.random.default_rng(9)
    # Random rows: the striped order (q outer, M's lanes then D's) and the node numbers.
    ks = set()
    for _ in range(300):
        Q = int(generator.integers(2, 6))
        M = generator.random((Q, 4)).astype(F32) * (generator.random((Q, 4)) < 0.7)
        D = generator.random((Q, 4)).astype(F32) * (generator.random((Q, 4)) < 0.3)
        E = F32(M.sum() + D.sum()) * F32(generator.choice([1.0, 0.999, 0.5, 0.3]))  # <1: repeated sweeps
        ours, expected = _select_e(lib, int(generator.integers(1, 2**32)), M, D, E)
        assert ours == expected
        ks.add(ours[:2])
    assert len(ks) > 20
    # A cell times the float32 1/E straddling the draw: the product is float32, summed in double.
    weight = F32(1.0) / F32(3.0)
    straddling = 0
    for x in generator.integers(1, 2**32, size=200).tolist():
        roll = _next_draw(x)
        v = F32(roll / float(weight))
        for _ in range(40):
            if (roll < float(F32(v * weight))) != (roll < float(v) * float(weight)):
                break
            v = np.nextafter(v, F32(np.inf), dtype=F32)
        else:
            continue
        M, D = np.zeros((2, 4), F32), np.zeros((2, 4), F32)
        M[0, 0], M[1, 2] = v, F32(3.0)
        ours, expected = _select_e(lib, x, M, D, F32(3.0))
        assert ours == expected
        straddling += 1
    assert straddling >= 20
    # Weights that never reach the draw (all 0, or NaN from E = 0) stall: the reference would
    # loop forever; the header gives up.
    for E in (F32(1.0), F32(0.0)):
        ours, _ = _select_e(lib, 12345, np.zeros((2, 4), F32), np.zeros((2, 4), F32), E)
        assert ours[0] is None


def test_stochastic_traces_of_regions(lib, regions):
    """200 consecutive traces of each multi-domain region from one reseeded generator (as
    region_trace_ensemble draws them): every step, and the generator's state after."""
    sampled = 0
    for case, (profile, target, bounds) in regions.items():
        assert bounds, case
        for i, j in bounds:
            xf, fwd = _region_matrix(profile, target, i, j)
            capacity = 4 * (fwd.L + profile.M) + 16
            status, ours, state = _c_traces(lib, profile, xf, fwd, NSAMPLES, capacity)
            assert status == TAIL_OK, (case, i, j)
            rng = FastRandomness(SEED)
            rng.reseed()
            for t, (st, k, ii) in enumerate(ours):
                trace = stochastic_trace(rng, profile, xf, fwd)
                assert (st, k, ii) == ("".join(trace.st), trace.k, trace.i), (case, i, j, t)
            assert state == rng.x, (case, i, j)
            sampled += 1
    assert sampled >= 5


def test_stochastic_traces_of_a_whole_target(lib, regions):
    """The whole target's full Forward matrix is as valid an input as a region's."""
    profile, target, _ = regions["HTH_3", 226]
    xf, fwd = _region_matrix(profile, target, 1, len(target.residues))
    status, ours, state = _c_traces(lib, profile, xf, fwd, 50, 4 * (fwd.L + profile.M) + 16, seed=7)
    assert status == TAIL_OK
    rng = FastRandomness(7)
    for st, k, i in ours:
        trace = stochastic_trace(rng, profile, xf, fwd)
        assert (st, k, i) == ("".join(trace.st), trace.k, trace.i)
    assert state == rng.x
    # A trace that does not fit its capacity is refused, not cut.
    status, _, _ = _c_traces(lib, profile, xf, fwd, 1, fwd.L // 2)
    assert status == TAIL_CAPACITY


def _region_segments(profile, target, i, j):
    """The segments region_trace_ensemble collects from its 200 samples (the reference)."""
    xf, fwd = _region_matrix(profile, target, i, j)
    rng = FastRandomness(SEED)
    rng.reseed()
    found = []
    for sample in range(NSAMPLES):
        trace = stochastic_trace(rng, profile, xf, fwd)
        for domain in trace.domains():
            found.append((sample, domain.sqfrom + i - 1, domain.sqto + i - 1, domain.hmmfrom, domain.hmmto))
    return [list(column) for column in zip(*found)]


def test_cluster_of_sampled_regions(lib, regions):
    orders = []
    for case, (profile, target, bounds) in regions.items():
        for i, j in bounds:
            segments = _region_segments(profile, target, i, j)
            expected = _reference_cluster(segments, NSAMPLES)
            status, ours = _c_cluster(lib, segments, NSAMPLES)
            assert status == TAIL_OK, (case, i, j)
            assert expected, (case, i, j)
            _assert_envelopes_equal(ours, expected)
            orders.append([e[4] for e in expected])
    assert any(order != sorted(order) for order in orders)  # the sort reorders clusters somewhere


def _synthetic(generator, nsamples, domains, extra):
    """Segments of `nsamples` samples: each sample draws each of `domains` (i, j, k, m, chance)
    with a little jitter (its start often exact), plus `extra` random segments overall."""
    rows = []
    for sample in range(nsamples):
        for i, j, k, m, chance in domains:
            if generator.random() < chance:
                jitter = generator.integers(-3, 4, size=4) * (generator.random(4) < 0.5)
                a, b, c, d = i + jitter[0], j + jitter[1], k + jitter[2], m + jitter[3]
                rows.append((sample, a, max(a, b), c, max(c, d)))
        if generator.random() < extra:
            a, c = generator.integers(1, 300), generator.integers(1, 150)
            rows.append((sample, a, a + generator.integers(0, 60), c, c + generator.integers(0, 60)))
    rows.sort(key=lambda row: (row[0], row[1]))  # a trace's domains come in sequence order
    return [list(column) for column in zip(*rows)]


def test_cluster_of_synthetic_segments(lib):
    generator = np.random.default_rng(17)
    # Two domains starting at the same residue on different diagonals (ties in i), a domain
    # that first appears late (a high cluster number, sorted first), and overlapping ones.
    domains = [
        (50, 100, 1, 50, 0.9),
        (50, 110, 100, 150, 0.9),
        (10, 40, 60, 90, 0.6),
        (120, 200, 20, 100, 0.7),
        (130, 205, 25, 98, 0.5),
        (220, 221, 5, 5, 0.5),
    ]
    ties = reordered = 0
    for trial in range(60):
        nsamples = int(generator.integers(4, 40))
        picked = [domains[z] for z in generator.permutation(len(domains))[: generator.integers(1, len(domains) + 1)]]
        segments = _synthetic(generator, nsamples, picked, extra=float(generator.random()))
        if not segments:
            continue
        expected = _reference_cluster(segments, nsamples)
        status, ours = _c_cluster(lib, segments, nsamples)
        assert status == TAIL_OK, trial
        _assert_envelopes_equal(ours, expected)
        starts = [e[0] for e in expected]
        ties += len(starts) != len(set(starts))
        reordered += [e[4] for e in expected] != sorted(e[4] for e in expected)
    assert ties and reordered


def test_cluster_capacities(lib):
    generator = np.random.default_rng(5)
    segments = _synthetic(generator, 20, [(50, 100, 1, 50, 0.9), (150, 200, 1, 50, 0.9)], extra=0.5)
    expected = _reference_cluster(segments, 20)
    assert len(expected) == 2
    status, ours = _c_cluster(lib, segments, 20)
    assert status == TAIL_OK
    _assert_envelopes_equal(ours, expected)
    assert _c_cluster(lib, segments, 20, capacity=1)[0] == TAIL_CAPACITY
    assert _c_cluster(lib, segments, 20, scratch_bytes=64)[0] == TAIL_CAPACITY
    assert _c_cluster(lib, [[] for _ in range(5)], 20) == (TAIL_OK, [])
