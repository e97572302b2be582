"""Kernel choices as data: one table per GPU generation (CUDASW++4.0's habit), read by `choose`.

CUDAMPF++ §3.4: prefer the kernel with the most sequences per warp (S) whose coverage
L·W·H_max (L = 32/S threads per sequence, W cells per word) still holds the model (Eq. 4),
then the fewest words per thread H that do (Eq. 5). Past `single_above` nodes the
single-sequence kernel (CUDAMPF, S = 1) takes over (§3.4.2), with H as large as the model
needs. The 64- and 128-lane kernels are replaced by the 32-lane one for all small models (the
§3.4.2 small-model rule), so S ≤ 32 here.

`arithmetic` names the lane arithmetic: "dpx16" is 16-bit lanes on Hopper's DPX min/max-add
instructions, "simd8" CUDAMPF's four 8-bit lanes per register for GPUs without them.
"""

from __future__ import annotations

import dataclasses

from ..stages.msvlayout import Striping

SEQUENCES_PER_WARP = (32, 16, 8, 4, 2)

#: The Forward kernel's model size classes: (most nodes, warps per CTA). A warp keeps three rows
#: of float cells in shared memory, 12 bytes a node, so larger models get fewer warps per CTA.
FORWARD_CLASSES = ((256, 8), (1024, 8), (4096, 4))

#: The pair-list MSV kernel's words per lane, H (one warp per pair, 32·H nodes in registers):
#: a model takes the smallest that holds it. Past the last, the host runs MSV (no Pfam model is
#: that long).
MSV_PAIR_WORDS = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)

#: Keys are compute capabilities; a GPU uses the newest table not newer than itself. The sm_90
#: entries follow benchmarks/kernels.py and benchmarks/viterbi.py on an H100 (throughput rises
#: with H up to ~40 words, the single-sequence kernel is no slower past 1280 nodes, a 16-warp CTA
#: beats an 8-warp one where the table leaves room for one CTA per SM, and Viterbi is best at
#: h_max 28 with 4 warps per CTA). The pre-Hopper entries are CUDAMPF++'s choices (H_max from
#: its Table 1, S = 1 past Pfam's longest model then), not measured.
TABLES = {
    90: {
        "arithmetic": "dpx16",
        "ssv": {"h_max": 40, "single_above": 1280, "warps_per_sm": 16},
        "msv": {"h_max": 40, "single_above": 1280, "warps_per_sm": 16},
        "cta_warps": 8,
        "cta_warps_alone": 16,
        "shared_per_sm": 228 * 1024,
        "viterbi": {"h_max": 28, "cta_warps": 4},
        "forward": FORWARD_CLASSES,
        "msv_pairs": {"words": MSV_PAIR_WORDS, "cta_warps": 8},
    },
    70: {
        "arithmetic": "simd8",
        "ssv": {"h_max": 50, "single_above": 2405, "warps_per_sm": 16},
        "msv": {"h_max": 45, "single_above": 2405, "warps_per_sm": 16},
        "cta_warps": 8,
        "cta_warps_alone": 16,
        "shared_per_sm": 96 * 1024,
        "viterbi": {"h_max": 20, "cta_warps": 4},
        "forward": FORWARD_CLASSES,
        "msv_pairs": {"words": MSV_PAIR_WORDS, "cta_warps": 8},
    },
}

#: Cells per 32-bit word of each lane arithmetic.
CELLS_PER_WORD = {"dpx16": 2, "simd8": 4, "vit16": 2, "vit32": 1}


@dataclasses.dataclass(frozen=True)
class KernelChoice:
    stage: str  # "ssv", "msv" or "viterbi"
    arithmetic: str
    striping: Striping
    cta_warps: int  # warps per CTA, which share one copy of the model's table


def table_for(compute_capability):
    usable = [cc for cc in TABLES if cc <= compute_capability]
    if not usable:
        raise ValueError(f"no kernel table for compute capability {compute_capability}")
    return TABLES[max(usable)]


def _cta_warps(table, striping):
    """A CTA's warps share its table copy; where only one CTA's table fits an SM, a larger CTA
    keeps enough warps resident to hide latency."""
    if 2 * striping.shared_bytes > table["shared_per_sm"]:
        return table["cta_warps_alone"]
    return table["cta_warps"]


def choose(M, stage, compute_capability):
    table = table_for(compute_capability)
    arithmetic = table["arithmetic"]
    limits = table[stage]
    W = CELLS_PER_WORD[arithmetic]
    S = 1
    if M <= limits["single_above"]:
        for candidate in SEQUENCES_PER_WARP:
            if (32 // candidate) * W * limits["h_max"] >= M:
                S = candidate
                break
    lanes = (32 // S) * W
    H = max(2, -(-M // lanes))
    striping = Striping(S=S, H=H, W=W)
    return KernelChoice(stage, arithmetic, striping, _cta_warps(table, striping))


def choose_viterbi(M, arithmetic, compute_capability):
    """The Viterbi kernel for a model of M nodes in "vit16" or "vit32" lanes, or None if too large.

    The kernel keeps seven transition words per cell word in registers, so H stays at most
    `h_max`: the most sequences per warp whose lanes cover the model in that many words. A
    model that one sequence per warp cannot cover is left to the CPU tail.
    """
    limits = table_for(compute_capability)["viterbi"]
    W = CELLS_PER_WORD[arithmetic]
    for S in SEQUENCES_PER_WARP + (1,):
        if (32 // S) * W * limits["h_max"] >= M:
            H = -(-M // ((32 // S) * W))
            return KernelChoice("viterbi", arithmetic, Striping(S=S, H=H, W=W), limits["cta_warps"])
    return None


@dataclasses.dataclass(frozen=True)
class ForwardChoice:
    nodes: int  # the most nodes of the class: shared memory is sized for it
    cta_warps: int

    @property
    def shared_bytes(self):
        return self.cta_warps * 3 * self.nodes * 4


def choose_forward(M, compute_capability):
    """The Forward kernel's class for a model of M nodes, or None if too large (left to the CPU)."""
    for nodes, cta_warps in table_for(compute_capability)["forward"]:
        if M <= nodes:
            return ForwardChoice(nodes, cta_warps)
    return None


def choose_msv_pairs(M, compute_capability):
    """(H, warps per CTA) of the pair-list MSV kernel for a model of M nodes, or None if too large."""
    limits = table_for(compute_capability)["msv_pairs"]
    for H in limits["words"]:
        if 32 * H >= M:
            return H, limits["cta_warps"]
    return None
