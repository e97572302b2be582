"""What the oracle reads of HMMER 3.4's optimized profile beside its striped arrays
(`impl_sse/p7_oprofile.c`): a node's place in the striped vectors, `p7_oprofile_FGetEmission`,
a transition or DP cell by node, and the special-state transitions the tail sets itself.

`special_transitions` is `xf`, the E, N, J, C moves and loops, as `p7_oprofile_ReconfigMultihit`
/ `p7_oprofile_ReconfigUnihit` set them for the full target length L
(`p7_oprofile_ReconfigRestLength`: pmove = (2 + nj)/(L + 2 + nj) in float32, that association).
The configured profile's own `xf` is not used: `expf(-ln 2)` is exactly 0.5 with glibc, so the
first target's multihit E moves equal ReconfigMultihit's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuhmm.stages.tail.profile import F32


def lane(profile, k):
    """(q, z): where node k sits in the striped vectors."""
    return (k - 1) % profile.Q, (k - 1) // profile.Q


def emission(profile, x, k):
    """`p7_oprofile_FGetEmission`: the match emission odds ratio of residue x at node k."""
    return profile.emissions[(x, *lane(profile, k))]


def transition(profile, kind, k):
    """Transition `kind` of node k; 0 for k = 0, what HMMER's zero-filling shifts bring in."""
    return profile.transitions[(kind, *lane(profile, k))] if k > 0 else F32(0.0)


def cell(profile, rows, i, k):
    """Node k's cell in row i of striped DP `rows`; 0 for k = 0, as the shifts bring in."""
    return rows[(i, *lane(profile, k))] if k > 0 else F32(0.0)


@dataclasses.dataclass(frozen=True)
class SpecialTransitions:
    """`om->xf` as float32: E → C (`e_move`), E → J (`e_loop`), and the N, J, C moves and loops."""

    e_move: np.float32
    e_loop: np.float32
    move: np.float32  # N, J and C MOVE: pmove
    loop: np.float32  # N, J and C LOOP: 1 − pmove


def special_transitions(L, multihit):
    """`p7_oprofile_ReconfigMultihit(om, L)` (E moves ½, nj = 1) or `..._ReconfigUnihit(om, L)`
    (E → C only, nj = 0)."""
    nj = F32(1.0) if multihit else F32(0.0)
    move = (F32(2.0) + nj) / ((F32(L) + F32(2.0)) + nj)
    e_move, e_loop = (F32(0.5), F32(0.5)) if multihit else (F32(1.0), F32(0.0))
    return SpecialTransitions(e_move=e_move, e_loop=e_loop, move=move, loop=F32(1.0) - move)
