"""(model, sequence) pair lists cut into launches: the batching every pair-list kernel shares."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class PairBatch:
    """One launch's work: pairs sorted by model then longest first, cut into chunks of one model
    and about `chunk_residues` residues; chunks are listed longest first, so a long sequence
    starts early instead of finishing last."""

    pair_sequence: np.ndarray  # int32
    pair_order: np.ndarray  # int64: position of each pair in the caller's list
    chunk_model: np.ndarray  # int32: model position in the launch
    chunk_start: np.ndarray  # int32
    chunk_end: np.ndarray  # int32


def pair_batch(pair_model, pair_sequence, lengths, chunk_residues):
    pair_model = np.asarray(pair_model, dtype=np.int64)
    pair_sequence = np.asarray(pair_sequence, dtype=np.int64)
    pair_length = np.asarray(lengths, dtype=np.int64)[pair_sequence]
    # By model, then longest first (ties in the given order): one int64 key, which a stable
    # sort of pairs that come by model and sequence (a shard is longest first) merges fast.
    longest = int(pair_length.max(initial=0))
    order = np.argsort(pair_model * (longest + 1) + (longest - pair_length), kind="stable")
    models, rows = pair_model[order], pair_length[order]
    new_model = np.r_[True, models[1:] != models[:-1]]
    before = np.cumsum(rows) - rows  # residues ahead of each pair, over all models
    model_first = np.maximum.accumulate(np.where(new_model, before, 0))
    slot = (before - model_first) // chunk_residues
    starts = np.flatnonzero(new_model | np.r_[True, slot[1:] != slot[:-1]])
    ends = np.r_[starts[1:], len(order)]
    longest_first = np.argsort(-rows[starts], kind="stable")
    return PairBatch(
        pair_sequence=pair_sequence[order].astype(np.int32),
        pair_order=order,
        chunk_model=models[starts][longest_first].astype(np.int32),
        chunk_start=starts[longest_first].astype(np.int32),
        chunk_end=ends[longest_first].astype(np.int32),
    )


def models_present(pair_model):
    """The models (positions in a task's list, so small integers) that some pair has, ascending:
    a count per model, where np.unique would hash every pair."""
    return np.flatnonzero(np.bincount(pair_model)).tolist()
