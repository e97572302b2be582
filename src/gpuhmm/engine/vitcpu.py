"""`p7_ViterbiFilter` on the CPU in compiled code, for the shuffles of `--shuffle-out`.

pyhmmer exposes HMMER's SSV and MSV filters but not its Viterbi filter, so `vitcpu.c` ports the
numpy reference (`engine.reference.vitfilter.viterbi_scores`) to C, cell for cell: its scores are
the reference's, bit for bit. It is built for the host at first use (`hostc`); without a
compiler the numpy reference scores instead. A call releases the GIL, so threads score
sequences in parallel.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np

from .._memo import memoized
from ..stages.vitfilter import _C, _E, _J, _LOOP, _MOVE, _N
from ..stages.vitlayout import OK, OVERFLOW, scores_from_xc
from . import hostc
from .reference.vitfilter import viterbi_scores

SOURCE = Path(__file__).with_name("vitcpu.c")


@functools.cache
def compiled():
    """The compiled scorer, or None (logged once) where it cannot be built."""
    function = hostc.function(
        SOURCE, "vitcpu_scores", "the CPU Viterbi filter", "the numpy reference scores instead, slowly"
    )
    if function is not None:
        function.restype = ctypes.c_int
        function.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int64, ctypes.c_void_p]
        function.argtypes += [ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    return function


def _node_order(profile):
    return memoized(profile, "vitcpu node order", lambda: _reordered(profile))


def _reordered(profile):
    """`profile`'s words in node order (node n = lane z of vector q, n = z·Q + q): emissions
    (Kp, 8Q); transitions (7, 8Q) as BM, MM, IM, DM, MD, MI, II; the D→D sums `close_d` adds
    (7, 8Q); and the special words."""
    Q = profile.Q
    nodes = 8 * Q
    emissions = np.ascontiguousarray(profile.rwv.transpose(0, 2, 1).reshape(len(profile.rwv), nodes))
    transitions = np.ascontiguousarray(profile.twv[: 7 * Q].reshape(Q, 7, 8).transpose(1, 2, 0).reshape(7, nodes))
    chain = np.concatenate([[0], np.cumsum(profile.twv[7 * Q :].T.reshape(-1).astype(np.int64))])
    node = np.arange(nodes)
    # D→D summed from node `start` up to node n (chain[n] − chain[start]), as two words.
    spans = [np.maximum(node - 2, 0), np.maximum(node - 4, 0), np.maximum(node - node % 8 - 1, 0)]
    closure = [chain[node] - chain[np.maximum(node - 1, 0)]]
    for start in spans:
        total = np.maximum(chain[node] - chain[start], -65536)
        closure += [np.maximum(total, -32768), total - np.maximum(total, -32768)]
    xw = profile.xw.astype(np.int64)
    specials = np.array(
        [xw[_E, _MOVE], xw[_E, _LOOP], xw[_N, _LOOP], xw[_J, _LOOP], xw[_C, _LOOP], profile.base_w, profile.ddbound_w],
        dtype=np.int64,
    )
    return emissions, transitions, np.array(closure, dtype=np.int16), specials


def scores(profile, sequences):
    """`p7_ViterbiFilter` scores (float32 nats; +inf on overflow, −inf where C is never reached)
    of `sequences`, a (count, L) uint8 array of residue codes, all of one length."""
    sequences = np.ascontiguousarray(sequences, dtype=np.uint8)
    count, length = sequences.shape
    function = compiled()
    if function is None or not length:
        return viterbi_scores(profile, list(sequences))
    emissions, transitions, closure, specials = _node_order(profile)
    move = profile.move_word(length)
    xc = np.empty(count, dtype=np.int64)
    overflow = np.empty(count, dtype=np.uint8)
    status = function(
        8 * profile.Q,
        emissions.ctypes.data,
        transitions.ctypes.data,
        closure.ctypes.data,
        specials.ctypes.data,
        move,
        sequences.ctypes.data,
        length,
        count,
        xc.ctypes.data,
        overflow.ctypes.data,
    )
    if status:
        raise MemoryError("the CPU Viterbi filter could not allocate its rows")
    return scores_from_xc(profile.base_w, profile.scale_w, xc, np.full(count, move), np.where(overflow, OVERFLOW, OK))
