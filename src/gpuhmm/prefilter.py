"""The F1 stage for a batch of models against one resident shard: SSV, then MSV where SSV
cannot decide, then HMMER's P-value test, on an engine (the GPU, or the numpy reference).

Models are grouped by kernel specialization (`tuning.choose`); one launch covers a group ×
the whole shard. Sequences that SSV leaves undecided for any model of the batch are laid
out again in a small set of warp blocks and go through full MSV together.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import msv, reference, tuning
from .warpblocks import build_warp_blocks, stripe_table, cost_rows


@dataclasses.dataclass
class FilterShard:
    """A shard as the filters see it: residues, per-sequence length terms, warp blocks by S."""

    residues: np.ndarray
    offsets: np.ndarray
    tjb: np.ndarray  # uint8 per sequence
    null1: np.ndarray  # float32 per sequence
    blocks: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def build(cls, residues, offsets, alphabet):
        tjb, null1 = msv.LengthTerms.for_lengths(alphabet, np.diff(offsets)).lookup(np.diff(offsets))
        return cls(residues, offsets, tjb, null1)

    @classmethod
    def from_digital(cls, sequences):
        """From pyhmmer digital sequences, in the given order."""
        pieces = [np.asarray(s.sequence, dtype=np.uint8) for s in sequences]
        offsets = np.concatenate([[0], np.cumsum([len(p) for p in pieces])]).astype(np.int64)
        residues = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
        return cls.build(residues, offsets, sequences[0].alphabet)

    @property
    def sequences(self):
        return len(self.offsets) - 1

    @property
    def lengths(self):
        return np.diff(self.offsets)

    def warp_blocks(self, S, warps):
        if (S, warps) not in self.blocks:
            self.blocks[(S, warps)] = build_warp_blocks(self.residues, self.offsets, S, warps)
        return self.blocks[(S, warps)]

    def subset(self, indices):
        lengths = self.lengths[indices]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        pieces = [self.residues[self.offsets[i]:self.offsets[i + 1]] for i in indices.tolist()]
        residues = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
        return FilterShard(residues, offsets, self.tjb[indices], self.null1[indices])


@dataclasses.dataclass(frozen=True)
class F1Result:
    scores: np.ndarray  # float32 nats per sequence, +inf for overflow (p7_MSVFilter's usc)
    passed: np.ndarray  # bool per sequence: P ≤ F1 (False for empty sequences)
    ssv_undecided: np.ndarray  # bool per sequence


class ReferenceEngine:
    """The numpy reference behind the engine interface (see `reference`)."""

    def __init__(self, compute_capability=90, warps=64):
        self.compute_capability = compute_capability
        self._warps = warps

    def warps(self, warps_per_sm):
        return self._warps

    def _tables(self, choice, model):
        values, fill = cost_rows(model, choice.arithmetic)
        return stripe_table(values, choice.striping, fill)

    def ssv(self, choice, blocks, models, sequences):
        return np.stack([
            reference.run_ssv(blocks, self._tables(choice, m), choice.striping, choice.arithmetic, m.bias, sequences)
            for m in models
        ])

    def msv(self, choice, blocks, models, tjb, sequences):
        return np.stack([
            reference.run_msv(blocks, self._tables(choice, m), choice.striping, choice.arithmetic, m,
                              tjb.astype(np.int32) + m.tbm, sequences)
            for m in models
        ])


def _by_choice(models, stage, compute_capability):
    groups = {}
    for position, model in enumerate(models):
        groups.setdefault(tuning.choose(model.M, stage, compute_capability), []).append(position)
    return groups


def f1_filter(engine, models, shard, F1):
    """`p7_MSVFilter` + the F1 test for every model × every sequence of `shard`."""
    cc = engine.compute_capability
    limits = tuning.table_for(cc)
    for model in models:
        if model.base + model.bias > 255:
            raise ValueError(f"model {model.name}: base + bias > 255, outside the 16-bit MSV proof")
    best = np.zeros((len(models), shard.sequences), dtype=np.uint8)
    for choice, positions in _by_choice(models, "ssv", cc).items():
        blocks = shard.warp_blocks(choice.striping.S, engine.warps(limits["ssv"]["warps_per_sm"]))
        best[positions] = engine.ssv(choice, blocks, [models[p] for p in positions], shard.sequences)
    outcomes = [msv.ssv_outcome(model, best[i], shard.tjb) for i, model in enumerate(models)]
    nonempty = shard.lengths > 0
    undecided = np.array([decision == msv.SSV_UNDECIDED for decision, _ in outcomes])
    undecided = undecided.reshape(len(models), shard.sequences) & nonempty
    full = np.zeros((len(models), shard.sequences), dtype=np.int16)
    rows = np.flatnonzero(undecided.any(axis=1))
    if len(rows):
        needed = np.flatnonzero(undecided[rows].any(axis=0))
        small = shard.subset(needed)
        sub_models = [models[r] for r in rows]
        for choice, positions in _by_choice(sub_models, "msv", cc).items():
            blocks = small.warp_blocks(choice.striping.S, engine.warps(limits["msv"]["warps_per_sm"]))
            values = engine.msv(choice, blocks, [sub_models[p] for p in positions], small.tjb, small.sequences)
            full[np.ix_(rows[positions], needed)] = values
    results = []
    for i, model in enumerate(models):
        decision, x_j = outcomes[i]
        scores = msv.msv_scores(model, decision, x_j, shard.tjb, full[i])
        passed = (msv.f1_pvalues(model, scores, shard.null1) <= F1) & nonempty
        results.append(F1Result(scores, passed, undecided[i]))
    return results
