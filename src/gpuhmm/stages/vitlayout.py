"""What the Viterbi-filter kernel (kernels/vit.cu) reads, and why its 16-bit lanes are exact.

A model becomes one byte blob: 29 emission rows and the D→D row (copied to shared memory),
then the BM, MM, IM, DM, MD, MI and II rows (read once into registers), all striped as
`msvlayout.stripe_table` lays them out.
Pairs (model, sequence) are grouped into chunks of one model each; a CTA takes a chunk.

Why Vit16 is exact where it reports OK. HMMER adds with int16 saturation; DPX adds wrap. The
kernel floors every cell at F = −8192 and every parameter at P = −24576, so a sum is never
below F + P = −32768 and never wraps below. Let G = base + move(L) + min BM: every M cell of a
real node is at least its B→M entry, xB + BM ≥ G, in HMMER and here alike.
* A value ≤ G − 1 ("dead") can never decide an M cell again: whatever path leads from it into an
  M cell adds only transitions (≤ 0; inserts emit 0) before that cell's emission, so it stays
  below the cell's B→M entry. Every real parameter is ≥ P (checked per model,
  `lanes16_supported`); the −inf ones left lead only from the always-dead node 0 or out of node
  M into padding. So real-node cells here equal HMMER's, or both are dead (F ≤ G − 1 is checked
  per pair on the device).
* Padding nodes (past M) get P for every parameter: each of their candidates is at most
  32767 + P, plus an emission P, which is under F; so padding M cells sit at F, dead.
* xE, xJ, xB and xC then agree wherever a row has a live M cell; xN = base keeps xB above any dead
  xJ, and a pair whose rows were all dead reports NEEDS_EXACT.
* Above: a cell is at most max(base, the largest xE so far) + E_max, so while xE ≤ 32767 − E_max
  nothing can wrap or saturate at the top; the row where xE passes that reports NEEDS_EXACT.
* Residues with −inf emissions (gap, '*', '~', as at the end of many translated proteins) put
  HMMER's M cells at most R − 32768, R = max(base, the largest xE so far): dead while
  R ≤ G + 32767. On the last row (a trailing '*') the kernel leaves that row out of xE; a pair
  with such a residue anywhere else, or with R above that, reports NEEDS_EXACT.
* D→D: the kernel closes the D chain on every row. HMMER closes it only where its ddbound test
  says a D→D path could beat entering from B, and its M values are the closure's either way.
NEEDS_EXACT pairs run again with Vit32, HMMER's own arithmetic in 32-bit cells.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .._memo import memoized
from .msvlayout import stripe_table
from .vitfilter import _C, _E, _J, _LOOP, _MOVE, _N, NEG_INF_WORD

PARAMETER_FLOOR = -24576
CELL_FLOOR = {"vit16": -8192, "vit32": -32768}
#: Vit32's padding parameters: far below anything, so padding M cells stay at −32768 as HMMER's do.
PADDING32 = -(1 << 20)
EMISSION_ROWS = 29
SHARED_ROWS = 30  # the emission rows, then D→D
#: Residue codes with −inf emissions in every profile: gap, nonresidue '*', missing '~'.
INFINITE_RESIDUES = (20, 27, 28)
_FINITE_RESIDUES = [x for x in range(EMISSION_ROWS) if x not in INFINITE_RESIDUES]
OK, OVERFLOW, NEEDS_EXACT = 0, 1, 2


def lanes16_supported(profile):
    """Whether every real parameter is ≥ the parameter floor (bar HMMER's known −inf ones) and
    the special loops are 0, the conditions the Vit16 argument needs."""
    return memoized(profile, "lanes16 supported", lambda: _lanes16_supported(profile))


def _lanes16_supported(profile):
    transitions = profile.node_transitions
    loops_zero = all(int(profile.xw[x, _LOOP]) == 0 for x in (_N, _J, _C))
    return bool(
        loops_zero
        and transitions[0].min() >= PARAMETER_FLOOR
        # MM, IM, DM into node 1 come from node 0, which does not exist
        and transitions[1:4, 1:].min(initial=PARAMETER_FLOOR) >= PARAMETER_FLOOR
        # MD, MI, II, DD out of node M
        and transitions[4:8, :-1].min(initial=PARAMETER_FLOOR) >= PARAMETER_FLOOR
        and profile.node_emissions[_FINITE_RESIDUES].min() >= PARAMETER_FLOOR
    )


def kernel_values(profile, lanes, total_nodes):
    """(emissions (29, N), transitions (8, N)) as the kernel adds them, N = total_nodes ≥ M."""
    M = profile.M
    pad = PARAMETER_FLOOR if lanes == "vit16" else PADDING32
    emissions = np.full((EMISSION_ROWS, total_nodes), pad, dtype=np.int32)
    transitions = np.full((8, total_nodes), pad, dtype=np.int32)
    emissions[:, :M] = profile.node_emissions
    transitions[:, :M] = profile.node_transitions
    if lanes == "vit16":
        emissions[:, :M] = np.maximum(emissions[:, :M], PARAMETER_FLOOR)
        transitions[:, :M] = np.maximum(transitions[:, :M], PARAMETER_FLOOR)
    return emissions, transitions


@dataclasses.dataclass(frozen=True)
class KernelParameters:
    """One model's scalars (vit.cu's ViterbiParameters, in order)."""

    base: int
    e_move: int
    e_loop: int
    bm_min: int
    e_max: int

    def as_row(self):
        return [self.base, self.e_move, self.e_loop, self.bm_min, self.e_max]


def kernel_parameters(profile):
    return memoized(profile, "kernel parameters", lambda: _kernel_parameters(profile))


def _kernel_parameters(profile):
    return KernelParameters(
        base=int(profile.base_w),
        e_move=int(profile.xw[_E, _MOVE]),
        e_loop=int(profile.xw[_E, _LOOP]),
        bm_min=int(profile.node_transitions[0].min()),
        e_max=max(0, int(profile.node_emissions[_FINITE_RESIDUES].max())),
    )


def model_blob(profile, lanes, striping):
    """The model's bytes as vit.cu reads them (see the module docstring)."""
    return memoized(profile, ("viterbi blob", lanes, striping), lambda: _blob(profile, lanes, striping))


def _blob(profile, lanes, striping):
    s = striping
    dtype = np.int16 if s.W == 2 else np.int32
    emissions, transitions = kernel_values(profile, lanes, s.nodes)
    shared = np.concatenate([emissions, transitions[7:8]]).astype(dtype)
    registers = transitions[:7].astype(dtype)
    fill = dtype(PARAMETER_FLOOR if lanes == "vit16" else PADDING32)
    return np.concatenate([stripe_table(shared, s, fill).reshape(-1), stripe_table(registers, s, fill).reshape(-1)])


def shared_bytes(striping):
    return SHARED_ROWS * striping.row_bytes


def sequence_moves(profile, lengths):
    """The N/J/C MOVE word per sequence (HMMER's per-length reconfiguration)."""
    unique, inverse = np.unique(np.asarray(lengths, dtype=np.int64), return_inverse=True)
    words = np.array([profile.move_word(int(n)) if n else 0 for n in unique], dtype=np.int16)
    return words[inverse]


def scores_from_xc(base_w, scale_w, xc, moves, status):
    """`p7_ViterbiFilter`'s float steps: ((xC + move − base)/scale) − 3, in nats; +inf for an
    overflow, −inf where C was never reached. `base_w` and `scale_w` are each pair's model's
    (arrays) or one model's."""
    base_w, scale_w = np.asarray(base_w, dtype=np.float32), np.asarray(scale_w, dtype=np.float32)
    nats = (xc.astype(np.float32) + moves.astype(np.float32) - base_w) / scale_w
    scores = (nats.astype(np.float64) - 3.0).astype(np.float32)
    scores[xc <= NEG_INF_WORD] = -np.inf
    scores[status == OVERFLOW] = np.inf
    return scores


def launch_parameters(profiles, lanes, striping):
    """What vit.cu reads of `profiles` in one launch: their blobs end to end, each one's offset,
    and their `KernelParameters` rows."""
    blobs = [model_blob(profile, lanes, striping) for profile in profiles]
    offsets = np.concatenate([[0], np.cumsum([len(b) for b in blobs])[:-1]]).astype(np.int64)
    parameters = np.array([kernel_parameters(profile).as_row() for profile in profiles], dtype=np.int32)
    return np.concatenate(blobs), offsets, parameters
