"""The tail's posterior headers (kernels/tail/decoding.cuh, null2.cuh, optacc.cuh), built for the
host, against the numpy reference (tests/oracle/decoding.py, null2.py, optacc.py, itself
bit-exact with pyhmmer through test_domains), every float bit for bit: domain decoding of whole
targets' parser matrices; per envelope (the reference domain definition's, and sub-ranges)
posterior decoding out of place and in place, null2 by expectation, the optimal accuracy matrix
and score (written over Forward's storage), its trace with posteriors; null2 by trace for sampled
and OA domains; Backward's own scale factors and scale-product overflow. Decoding, null2 by
expectation and the optimal accuracy fill run as lane groups (the 4 lanes as host coroutines)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from gpuhmm.stages.tail.profile import F32

from helpers import tail_build
from helpers.tail import striped_profiles
from oracle import decoding, null2, optacc
from oracle.domaindef import define_domains
from oracle.fwdback import SCALE, DPMatrix, N, RangeError, backward, forward
from oracle.oprofile import lane, special_transitions
from oracle.stotrace import FastRandomness, stochastic_trace
from oracle.target import Target
from oracle.trace import Trace as ReferenceTrace

SHIM = r"""
#include <cmath>
#include <cstring>
#include "decoding.cuh"
#include "null2.cuh"
#include "optacc.cuh"
using namespace gpuhmm::tail;

extern "C" {
int c_domain_decoding(const SpecialTransitions *xf, const Matrix *fwd, const Matrix *bck, float *btot, float *etot,
                      float *mocc) {
    return domain_decoding(xf, fwd, bck, btot, etot, mocc);
}
// The lane-group stages, each by the 4 lanes of a host group: lane 0's result, or -1 (-inf) where
// the lanes' results differ.
int c_decoding(const SpecialTransitions *xf, const Matrix *fwd, const Matrix *bck, Posteriors *pp) {
    int status[4];
    run_lane_group([&](const LaneGroup &g) {
        Posteriors mine = *pp;
        status[g.z] = decoding(g, xf, fwd, bck, &mine);
        if (g.z == 0) *pp = mine;
    });
    for (int z = 1; z < 4; z++)
        if (status[z] != status[0]) return -1;
    return status[0];
}
void c_null2_by_expectation(const Profile *om, const Posteriors *pp, f4 *scratch, float *out) {
    run_lane_group([&](const LaneGroup &g) { null2_by_expectation(g, om, pp, scratch, out); });
}
// p7_Null2_ByTrace of the domain at trace steps start..end as the tail computes it: each
// emitting step counts toward its node, and null2_of_nodes sums over the used nodes in node order.
// `scratch`: 2·Q f4 (the counts by node, then the used nodes' offsets).
void c_null2_by_trace(const Profile *om, const Trace *tr, int start, int end, f4 *scratch, float *out) {
    const int Q = om->Q;
    float *counts = (float *)scratch;
    int *offsets = (int *)(scratch + Q);
    for (int k = 0; k < 4 * Q; k++) counts[k] = 0.0f;
    int emitted = 0;
    for (int z = start; z <= end; z++) {
        if (tr->i[z] > 0) {
            emitted++;
            counts[tr->k[z] - 1] += 1.0f;
        }
    }
    int n = 0;  // the used nodes, compacted in place in node order
    for (int k = 1; k <= 4 * Q; k++)
        if (counts[k - 1] != 0.0f) counts[n] = counts[k - 1], offsets[n++] = 4 * lane_q(k, Q) + lane_z(k, Q);
    null2_of_nodes(om, offsets, counts, n, 1.0f / (float)emitted, 0, 1, out);
    null2_degenerate_odds(om, out);
}
float c_optimal_accuracy(const Profile *om, const SpecialTransitions *xf, const Posteriors *pp, Matrix *oa) {
    float score[4];
    run_lane_group([&](const LaneGroup &g) { score[g.z] = optimal_accuracy(g, om, xf, pp, oa); });
    for (int z = 1; z < 4; z++)
        if (memcmp(&score[z], &score[0], sizeof(float))) return -INFINITY;
    return score[0];
}
int c_oa_trace(const Profile *om, const SpecialTransitions *xf, const Posteriors *pp, const Matrix *oa, Trace *tr) {
    return oa_trace(om, xf, pp, oa, tr);
}
}
"""

TAIL_OK, TAIL_RANGE, TAIL_CAPACITY = 0, 1, 2
#: (model, target index in proteins.faa) of test_domains: what each adds.
CASES = (
    ("Fer4", 185),  # M = 24, the envelope is the whole target
    ("HTH_3", 34),  # two single-domain regions
    ("HTH_3", 226),  # a multi-domain region: envelopes from sampled traces
    ("DUF6304", 394),  # M = 157
    ("tRNA-synt_1g", 141),  # M = 391
    ("ABC_tran", 71),  # the target has every degenerate residue: B J Z O U X
)
_P = ctypes.c_void_p


class Posteriors(ctypes.Structure):
    """`gpuhmm::tail::Posteriors` over numpy arrays (kept alive in `_keep`)."""

    _fields_ = [("L", ctypes.c_int), ("Q", ctypes.c_int)] + [(name, _P) for name in ("M", "I", "N", "J", "C")]

    @classmethod
    def over(cls, M, I, N, J, C):
        made = cls(M.shape[0] - 1, M.shape[1], *(a.ctypes.data for a in (M, I, N, J, C)))
        made._keep = (M, I, N, J, C)
        return made

    @classmethod
    def garbage(cls, L, Q):
        """Storage full of NaN, with the wrong L and Q: every value must be written."""
        made = cls.over(*(np.full(shape, np.nan, F32) for shape in [(L + 1, Q, 4)] * 2 + [L + 1] * 3))
        made.L = made.Q = -1
        return made

    @classmethod
    def from_reference(cls, pp):
        return cls.over(*(np.array(a, dtype=F32) for a in (pp.M, pp.I, pp.N, pp.J, pp.C)))

    def arrays(self):
        return self._keep


class Trace(ctypes.Structure):
    """`gpuhmm::tail::Trace` over numpy arrays."""

    _fields_ = [("n", ctypes.c_int), ("capacity", ctypes.c_int)] + [(name, _P) for name in ("st", "k", "i", "pp")]

    @classmethod
    def empty(cls, capacity, with_pp):
        arrays = [np.zeros(capacity, np.uint8), np.zeros(capacity, np.int32), np.zeros(capacity, np.int32)]
        arrays.append(np.full(capacity, np.nan, F32) if with_pp else None)
        made = cls(0, capacity, *(None if a is None else a.ctypes.data for a in arrays))
        made._keep = arrays
        return made

    @classmethod
    def from_reference(cls, trace):
        made = cls.empty(len(trace.st), trace.pp is not None)
        st, k, i, pp = made._keep
        st[:] = np.frombuffer("".join(trace.st).encode(), np.uint8)
        k[:], i[:] = trace.k, trace.i
        if pp is not None:
            pp[:] = trace.pp
        made.n = len(trace.st)
        return made

    def columns(self):
        st, k, i, pp = (None if a is None else a[: self.n] for a in self._keep)
        return st.tobytes().decode(), k.tolist(), i.tolist(), pp


@pytest.fixture(scope="module")
def lib():
    library = tail_build.build(SHIM)
    library.c_domain_decoding.argtypes = [_P] * 6
    library.c_decoding.argtypes = [_P] * 4
    library.c_null2_by_expectation.argtypes = [_P] * 4
    library.c_null2_by_expectation.restype = None
    library.c_null2_by_trace.argtypes = [_P, _P, ctypes.c_int, ctypes.c_int, _P, _P]
    library.c_null2_by_trace.restype = None
    library.c_optimal_accuracy.argtypes = [_P] * 4
    library.c_optimal_accuracy.restype = ctypes.c_float
    library.c_oa_trace.argtypes = [_P] * 5
    return library


@pytest.fixture(scope="module")
def cases(pfam_test_data):
    """Per case: profile, target, the whole target's multihit parser matrices and its envelopes
    (the reference domain definition's, then one sub-range of the first)."""
    hmms, sequences = pfam_test_data
    profiles = striped_profiles([hmm for hmm in hmms if hmm.name in {name for name, _ in CASES}])
    made = []
    for name, index in CASES:
        profile, target = profiles[name], Target.from_digital(sequences[index])
        L = len(target.residues)
        xf = special_transitions(L, multihit=True)
        fwd, _ = forward(profile, target.residues, xf)
        bck = backward(profile, target.residues, xf, fwd)
        definition = define_domains(profile, target, fwd, bck, FastRandomness(42))
        envelopes = [(d.ienv, d.jenv) for d in definition.domains]
        i, j = envelopes[0]
        envelopes.append((min(i + 3, j), max(j - 4, min(i + 3, j))))
        made.append((name, index, profile, target, fwd, bck, envelopes))
    return made


def _same(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _refs(*things):
    return [ctypes.byref(t) for t in things]


def _copy(matrix, **changes):
    copied = DPMatrix(
        matrix.specials.copy(),
        *(None if r is None else r.copy() for r in (matrix.M, matrix.D, matrix.I)),
        has_own_scales=matrix.has_own_scales,
    )
    for name, value in changes.items():
        setattr(copied, name, value)
    return copied


def _c_domain_decoding(lib, xf, fwd, bck):
    out = [np.full(fwd.L + 1, np.nan, F32) for _ in range(3)]
    cfwd, cbck = tail_build.Matrix.from_reference(fwd), tail_build.Matrix.from_reference(bck)
    cxf = tail_build.SpecialTransitions.from_reference(xf)
    status = lib.c_domain_decoding(*_refs(cxf, cfwd, cbck), *(a.ctypes.data for a in out))
    return status, out


def _assert_domain_decoding(lib, xf, fwd, bck):
    status, (btot, etot, mocc) = _c_domain_decoding(lib, xf, fwd, bck)
    assert status == TAIL_OK
    expected = decoding.domain_decoding(xf, fwd, bck)
    assert _same(btot, expected.btot) and _same(etot, expected.etot) and _same(mocc, expected.mocc)


def _assert_posteriors(ours, expected):
    assert (ours.L, ours.Q) == (expected.L, expected.M.shape[1])
    for a, b in zip(ours.arrays(), (expected.M, expected.I, expected.N, expected.J, expected.C)):
        assert _same(a, b)


def _own_scales(bck, seed):
    """`bck` as if Backward had kept its own scale factors (none of the cases' does): random
    factors ≥ 1 on about half the rows, so the scale product's ratios change row by row."""
    rng = np.random.default_rng(seed)
    changed = _copy(bck, has_own_scales=True)
    factors = F32(1.0) + rng.random(bck.L + 1).astype(F32) * F32(3.0e3)
    rows = rng.random(bck.L + 1) < 0.5
    changed.specials[rows, SCALE] = factors[rows]
    return changed


def test_domain_decoding_of_whole_targets(lib, cases):
    for _, _, _, target, fwd, bck, _ in cases:
        xf = special_transitions(len(target.residues), multihit=True)
        assert not bck.has_own_scales
        _assert_domain_decoding(lib, xf, fwd, bck)
        _assert_domain_decoding(lib, xf, fwd, _own_scales(bck, len(target.residues)))


def test_domain_decoding_overflow(lib, cases):
    _, _, _, target, fwd, bck, _ = cases[0]
    xf = special_transitions(len(target.residues), multihit=True)
    tiny = _copy(bck)
    tiny.specials[0, N] = np.float32(1e-45)  # 1/N_b(0) is +inf
    with np.errstate(over="ignore", invalid="ignore"):
        with pytest.raises(RangeError):
            decoding.domain_decoding(xf, fwd, tiny)
    assert _c_domain_decoding(lib, xf, fwd, tiny)[0] == TAIL_RANGE
    # Finite to start with, overflowing through Backward's own factors.
    grows = _own_scales(bck, 1)
    grows.specials[0, N] = np.float32(1e-36)
    grows.specials[1:, SCALE] = F32(1.0)
    fwd_big = _copy(fwd)
    fwd_big.specials[1:, SCALE] = F32(1.0e4)
    with np.errstate(over="ignore", invalid="ignore"):
        with pytest.raises(RangeError):
            decoding.domain_decoding(xf, fwd_big, grows)
    assert _c_domain_decoding(lib, xf, fwd_big, grows)[0] == TAIL_RANGE


def _envelope(profile, target, i, j, multihit=False):
    """Unihit (or multihit) full Forward and Backward of residues i..j (for the whole target's
    length)."""
    xf = special_transitions(len(target.residues), multihit=multihit)
    residues = target.residues[i - 1 : j]
    fwd, _ = forward(profile, residues, xf, full=True)
    return xf, residues, fwd, backward(profile, residues, xf, fwd, full=True)


def _c_decoding(lib, xf, fwd, bck, in_place):
    """(status, Posteriors, Backward's ctypes matrix) of the header's decoding; in place, the
    posteriors live in copies of Backward's M and I rows."""
    cxf = tail_build.SpecialTransitions.from_reference(xf)
    cfwd, cbck = tail_build.Matrix.from_reference(_copy(fwd)), tail_build.Matrix.from_reference(_copy(bck))
    if in_place:
        M, _, I = cbck.rows
        pp = Posteriors.over(M, I, *(np.full(fwd.L + 1, np.nan, F32) for _ in range(3)))
        pp.L = pp.Q = -1
        assert (pp.M, pp.I) == (cbck.M, cbck.I)  # the very storage Backward's rows are in
    else:
        pp = Posteriors.garbage(fwd.L, cfwd.Q)
    status = lib.c_decoding(*_refs(cxf, cfwd, cbck, pp))
    return status, pp, cbck


def _check_envelope(lib, profile, target, i, j, multihit=False):
    """Every stage of `rescore_isolated_domain` after Backward, C against the reference, first
    stage by stage from the reference's inputs, then chained as the caller runs them (decoded
    into Backward's rows, the OA matrix over Forward's). Returns the reference's OA trace."""
    xf, residues, fwd, bck = _envelope(profile, target, i, j, multihit)
    om, cxf = tail_build.Profile.from_striped(profile), tail_build.SpecialTransitions.from_reference(xf)
    Q, Kp = profile.Q, profile.alphabet.Kp
    expected = decoding.decoding(xf, fwd, bck)
    assert expected is not None and expected.M.any()

    status, ours, cbck = _c_decoding(lib, xf, fwd, bck, in_place=False)
    assert status == TAIL_OK
    _assert_posteriors(ours, expected)
    assert _same(cbck.specials, bck.specials) and _same(cbck.rows[0], bck.M)  # Backward untouched

    # null2 by expectation, from the reference's posteriors.
    pp = Posteriors.from_reference(expected)
    scratch, out = np.full((2 * Q, 4), np.nan, F32), np.full(Kp, np.nan, F32)
    lib.c_null2_by_expectation(*_refs(om, pp), scratch.ctypes.data, out.ctypes.data)
    expected_null2 = null2.null2_by_expectation(profile, expected)
    assert _same(out, expected_null2)

    # Optimal accuracy over NaN storage: every cell and special written.
    expected_oa, expected_oasc = optacc.optimal_accuracy(profile, xf, expected)
    oa = tail_build.Matrix.empty(fwd.L, Q, full=True)
    for array in (oa.specials, *oa.rows):
        array.fill(np.nan)
    oasc = lib.c_optimal_accuracy(*_refs(om, cxf, pp, oa))
    assert _same(F32(oasc), expected_oasc)
    assert _same(oa.specials, expected_oa.specials)
    for a, b in zip(oa.rows, (expected_oa.M, expected_oa.D, expected_oa.I)):
        assert _same(a, b)

    # The OA trace from the reference's matrix, with posteriors.
    expected_trace = optacc.oa_trace(profile, xf, expected, expected_oa)
    reference_oa = tail_build.Matrix._over(
        fwd.L, Q, False, expected_oa.specials, [expected_oa.M, expected_oa.D, expected_oa.I]
    )
    tr = Trace.empty(2 * (fwd.L + profile.M) + 16, with_pp=True)
    assert lib.c_oa_trace(*_refs(om, cxf, pp, reference_oa, tr)) == TAIL_OK
    st, k, i_, pps = tr.columns()
    assert (st, k, i_) == ("".join(expected_trace.st), expected_trace.k, expected_trace.i)
    assert _same(pps, np.array(expected_trace.pp, dtype=F32))
    assert "M" in st
    # A trace one step short of room is full; exactly the room it needs is enough.
    short = Trace.empty(len(st) - 1, with_pp=True)
    assert lib.c_oa_trace(*_refs(om, cxf, pp, reference_oa, short)) == TAIL_CAPACITY
    exact = Trace.empty(len(st), with_pp=True)
    assert lib.c_oa_trace(*_refs(om, cxf, pp, reference_oa, exact)) == TAIL_OK
    assert exact.columns()[:3] == (st, k, i_)

    # Chained as rescore_isolated_domain runs them: in place, then OA into Forward's storage.
    status, chained, cbck = _c_decoding(lib, xf, fwd, bck, in_place=True)
    assert status == TAIL_OK
    _assert_posteriors(chained, expected)
    cfwd = tail_build.Matrix.from_reference(_copy(fwd))
    oasc = lib.c_optimal_accuracy(*_refs(om, cxf, chained, cfwd))
    assert _same(F32(oasc), expected_oasc) and _same(cfwd.specials, expected_oa.specials)
    for a, b in zip(cfwd.rows, (expected_oa.M, expected_oa.D, expected_oa.I)):
        assert _same(a, b)
    tr = Trace.empty(2 * (fwd.L + profile.M) + 16, with_pp=True)
    assert lib.c_oa_trace(*_refs(om, cxf, chained, cfwd, tr)) == TAIL_OK
    assert tr.columns()[:3] == (st, k, i_) and _same(tr.columns()[3], pps)
    lib.c_null2_by_expectation(*_refs(om, chained), scratch.ctypes.data, out.ctypes.data)
    assert _same(out, expected_null2)
    return expected_trace, residues


def test_envelopes(lib, cases):
    degenerate_seen = False
    for _, _, profile, target, _, _, envelopes in cases:
        for i, j in envelopes:
            _, residues = _check_envelope(lib, profile, target, i, j)
            K, Kp = profile.alphabet.K, profile.alphabet.Kp
            degenerate_seen |= bool(((residues > K) & (residues < Kp - 2)).any())
    assert degenerate_seen


def test_multihit_envelopes(lib, cases):
    """Decoding, null2 and optimal accuracy also hold with multihit special transitions (J in
    use), which the pipeline never asks of them but the code paths keep."""
    for _, _, profile, target, _, _, envelopes in cases[1:4]:
        i, j = envelopes[0]
        _check_envelope(lib, profile, target, i, j, multihit=True)


def _synthetic_posteriors(profile, L, rng):
    """Posteriors of dyadic values (1/8 .. 1) on real nodes, zero on padded lanes: the OA sums are
    exact, so its maxima tie often and every tie rule decides."""
    Q = profile.Q
    real = np.zeros((Q, 4), dtype=bool)
    for k in range(1, profile.M + 1):
        real[lane(profile, k)] = True
    M, I = (np.where(real, rng.integers(1, 9, (L + 1, Q, 4)) / 8.0, 0.0).astype(F32) for _ in range(2))
    M[0] = I[0] = 0.0
    N, J, C = (rng.integers(0, 9, L + 1).astype(F32) / F32(8.0) for _ in range(3))
    N[0] = J[0] = C[0] = 0.0
    return decoding.Posteriors(M=M, I=I, N=N, J=J, C=C)


def test_optimal_accuracy_ties(lib, cases):
    rng = np.random.default_rng(7)
    compared = 0
    for _, _, profile, _, _, _, _ in cases:
        om = tail_build.Profile.from_striped(profile)
        for multihit in (False, True):
            xf = special_transitions(300, multihit)
            cxf = tail_build.SpecialTransitions.from_reference(xf)
            for L in (1, 2, 7, 40):
                expected = _synthetic_posteriors(profile, L, rng)
                pp = Posteriors.from_reference(expected)
                expected_oa, expected_oasc = optacc.optimal_accuracy(profile, xf, expected)
                oa = tail_build.Matrix.empty(L, profile.Q, full=True)
                assert _same(F32(lib.c_optimal_accuracy(*_refs(om, cxf, pp, oa))), expected_oasc)
                assert _same(oa.specials, expected_oa.specials)
                for a, b in zip(oa.rows, (expected_oa.M, expected_oa.D, expected_oa.I)):
                    assert _same(a, b)
                expected_trace = optacc.oa_trace(profile, xf, expected, expected_oa)
                tr = Trace.empty(len(expected_trace.st) + 8, with_pp=True)  # multihit: many domains
                assert lib.c_oa_trace(*_refs(om, cxf, pp, oa, tr)) == TAIL_OK
                st, k, i, pps = tr.columns()
                assert (st, k, i) == ("".join(expected_trace.st), expected_trace.k, expected_trace.i)
                assert _same(pps, np.array(expected_trace.pp, dtype=F32))
                compared += 1
    assert compared == len(cases) * 8


def test_decoding_with_own_scales_and_overflow(lib, cases):
    for _, _, profile, target, _, _, envelopes in cases[:3]:
        i, j = envelopes[0]
        xf, _, fwd, bck = _envelope(profile, target, i, j)
        changed = _own_scales(bck, i)
        expected = decoding.decoding(xf, fwd, changed)
        for in_place in (False, True):
            status, ours, _ = _c_decoding(lib, xf, fwd, changed, in_place)
            assert status == TAIL_OK
            _assert_posteriors(ours, expected)
        assert not _same(expected.M, decoding.decoding(xf, fwd, bck).M)  # the factors mattered
        # Overflow: the reference gives None; the header TAIL_RANGE and leaves the rows alone.
        tiny = _copy(bck)
        tiny.specials[0, N] = np.float32(1e-45)
        with np.errstate(over="ignore", invalid="ignore"):
            assert decoding.decoding(xf, fwd, tiny) is None
        status, ours, cbck = _c_decoding(lib, xf, fwd, tiny, in_place=True)
        assert status == TAIL_RANGE
        assert _same(cbck.rows[0], bck.M) and _same(cbck.rows[2], bck.I)


def _c_null2_by_trace(lib, profile, trace, start, end):
    om, tr = tail_build.Profile.from_striped(profile), Trace.from_reference(trace)
    scratch = np.full((2 * profile.Q, 4), np.nan, F32)
    out = np.full(profile.alphabet.Kp, np.nan, F32)
    lib.c_null2_by_trace(*_refs(om, tr), start, end, scratch.ctypes.data, out.ctypes.data)
    return out


def test_null2_by_trace(lib, cases):
    """Sampled domains of each case's first envelope as a multihit region (as region_trace_ensemble
    samples), and the OA trace's domain."""
    compared = 0
    for _, _, profile, target, _, _, envelopes in cases:
        i, j = envelopes[0]
        xf = special_transitions(len(target.residues), multihit=True)
        fwd, _ = forward(profile, target.residues[i - 1 : j], xf, full=True)
        rng = FastRandomness(42)
        traces = [stochastic_trace(rng, profile, xf, fwd) for _ in range(8)]
        traces.append(_check_envelope(lib, profile, target, i, j)[0])
        for trace in traces:
            for domain in trace.domains():
                expected = null2.null2_by_trace(profile, trace, domain.tfrom, domain.tto)
                assert _same(_c_null2_by_trace(lib, profile, trace, domain.tfrom, domain.tto), expected)
                compared += 1
    assert compared >= 2 * len(cases)


def test_null2_degenerate_mean(lib, cases):
    """A synthetic domain with nodes used unevenly: each degenerate code's odds is the float32 mean
    of its members' (the last code before the gap-likes averages all K), gap, '*' and '~' are 1."""
    _, _, profile, _, _, _, _ = cases[3]
    abc = profile.alphabet
    trace = ReferenceTrace()
    for state, k, i in [("B", 0, 0)] + [("M", k, k) for k in range(1, 40, 3)] + [("E", 0, 0)]:
        trace.append(state, k, i)
    ours = _c_null2_by_trace(lib, profile, trace, 0, len(trace.st) - 1)
    expected = null2.null2_by_trace(profile, trace, 0, len(trace.st) - 1)
    assert _same(ours, expected)
    assert len(abc.degenerate) == abc.Kp - abc.K - 3 and abc.degenerate[-1] == tuple(range(abc.K))
    for x, members in enumerate(abc.degenerate, start=abc.K + 1):
        total = F32(0.0)
        for y in members:
            total = total + ours[y]
        assert _same(ours[x], total / F32(len(members)))
    assert (ours[[abc.K, abc.Kp - 2, abc.Kp - 1]] == 1.0).all() and len(set(ours[: abc.K].tolist())) > 1
