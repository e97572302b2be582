"""The tail's Forward and Backward (kernels/tail/fwdback.cuh, built for the host: the 4 threads of
a lane group, one per SSE lane, as host coroutines) against the numpy reference
(tests/oracle/fwdback.py, itself bit-exact with pyhmmer): parser and full matrices, multihit
over whole targets and unihit over sub-ranges, every float bit for bit, the same in every lane."""

from __future__ import annotations

import ctypes

import numpy as np
import pyhmmer
import pytest

from gpuhmm.stages import vitfilter
from gpuhmm.stages.tail.profile import StripedProfile

from helpers import tail_build
from oracle import fwdback
from oracle.oprofile import special_transitions

SHIM = """
#include <cstring>
#include "fwdback.cuh"
using namespace gpuhmm::tail;
// Forward then Backward by a lane group: the status, or -1 where the lanes' scores differ.
extern "C" int tail_fwdback(const Profile *om, const unsigned char *dsq, int L, const SpecialTransitions *xf,
                            Matrix *fwd, Matrix *bck, f4 *rows, float *score) {
    int status[4];
    float scores[4];
    run_lane_group([&](const LaneGroup &g) {
        Matrix f = *fwd, b = *bck;
        status[g.z] = group_forward(g, om, dsq, L, xf, &f, rows, &scores[g.z]);
        if (status[g.z] == TAIL_OK) status[g.z] = group_backward(g, om, dsq, L, xf, &f, &b, rows);
        if (g.z == 0) bck->has_own_scales = b.has_own_scales;
    });
    *score = scores[0];
    for (int z = 1; z < 4; z++)
        if (status[z] != status[0] || memcmp(&scores[z], &scores[0], 4)) return -1;
    return status[0];
}
"""

#: (model, target index in proteins.faa): M ≥ 100 with its D→D early exit among them, rescaling.
CASES = (("HTH_3", 226), ("DUF6304", 394), ("tRNA-synt_1g", 141), ("Fer4", 344), ("ABC_tran", 71))


@pytest.fixture(scope="module")
def cases(pfam_test_data):
    hmms, sequences = pfam_test_data
    chosen = {name for name, _ in CASES}
    hmms = [hmm for hmm in hmms if hmm.name in chosen]
    written = vitfilter.configured(hmms, pyhmmer.plan7.Background(hmms[0].alphabet))
    profiles = {hmm.name: StripedProfile.from_configured(*c) for hmm, c in zip(hmms, written)}
    return [(profiles[name], np.asarray(sequences[index].sequence, dtype=np.uint8)) for name, index in CASES]


def _same(a, b):
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32), np.asarray(b, np.float32).view(np.uint32))


def _run(profile, residues, xf, full):
    lib = tail_build.build(SHIM)
    pointer = ctypes.c_void_p
    lib.tail_fwdback.argtypes = [pointer, pointer, ctypes.c_int, pointer, pointer, pointer, pointer, pointer]
    om = tail_build.Profile.from_striped(profile)
    cxf = tail_build.SpecialTransitions.from_reference(xf)
    L, Q = len(residues), profile.Q
    dsq = np.ascontiguousarray(residues)
    rows = np.zeros((6 * Q, 4), dtype=np.float32)
    fwd, bck = tail_build.Matrix.empty(L, Q, full), tail_build.Matrix.empty(L, Q, full)
    score = ctypes.c_float()
    args = (ctypes.byref(om), dsq.ctypes.data, L, ctypes.byref(cxf), ctypes.byref(fwd), ctypes.byref(bck))
    assert lib.tail_fwdback(*args, rows.ctypes.data, ctypes.byref(score)) == 0, profile.name
    return fwd, bck, np.float32(score.value), bool(bck.has_own_scales)


@pytest.mark.parametrize("full", [False, True], ids=["parser", "full"])
def test_whole_targets_multihit(cases, full):
    for profile, residues in cases:
        xf = special_transitions(len(residues), multihit=True)
        ref_fwd, ref_score = fwdback.forward(profile, residues, xf, full=full)
        ref_bck = fwdback.backward(profile, residues, xf, ref_fwd, full=full)
        fwd, bck, score, own = _run(profile, residues, xf, full)
        assert _same(score, ref_score), profile.name
        assert _same(fwd.specials, ref_fwd.specials), profile.name
        assert _same(bck.specials, ref_bck.specials), profile.name
        assert own == ref_bck.has_own_scales
        if full:
            for ours, theirs in zip(
                fwd.rows + bck.rows, (ref_fwd.M, ref_fwd.D, ref_fwd.I, ref_bck.M, ref_bck.D, ref_bck.I)
            ):
                assert _same(ours, theirs), profile.name


def test_envelopes_unihit(cases):
    """Sub-ranges scored in unihit mode for the full target length, as envelopes are."""
    rng = np.random.default_rng(3)
    for profile, residues in cases:
        L = len(residues)
        xf = special_transitions(L, multihit=False)
        for _ in range(2):
            i = int(rng.integers(1, L // 2))
            j = int(rng.integers(i + 10, L + 1))
            piece = residues[i - 1 : j]
            ref_fwd, ref_score = fwdback.forward(profile, piece, xf, full=True)
            ref_bck = fwdback.backward(profile, piece, xf, ref_fwd, full=True)
            fwd, bck, score, own = _run(profile, piece, xf, True)
            assert _same(score, ref_score)
            assert _same(fwd.specials, ref_fwd.specials) and _same(bck.specials, ref_bck.specials)
            assert own == ref_bck.has_own_scales
            for ours, theirs in zip(
                fwd.rows + bck.rows, (ref_fwd.M, ref_fwd.D, ref_fwd.I, ref_bck.M, ref_bck.D, ref_bck.I)
            ):
                assert _same(ours, theirs), profile.name
