"""The numpy reference engine: every kernel's arithmetic in numpy, behind the GPU engine's interface.

It is the CPU backend's engine where the GPU path is exercised without a GPU (tests), the oracle
CI checks the filter kernels' arithmetic against, and the host fallback for what a kernel leaves
out. The models of HMMER's own arithmetic live beside it, one module per stage: `msvfilter` (the
SSV and MSV lanes), `biasfilter` (`p7_bg_FilterScore`), `vitfilter` (`p7_ViterbiFilter` and the
Viterbi kernel's lanes) and `fwdfilter` (`p7_ForwardParser` in float64). The oracle of the stages
after the Forward filter is the tests' own (`tests/oracle/`).
"""

from __future__ import annotations

import numpy as np

from ...stages.msvfilter import F1_PASS, F1_UNDECIDED, f1_outcome
from ...stages.msvlayout import cost_rows, stripe_table
from ...stages.tail import launch
from ..pairs import models_present
from .biasfilter import bias_scores
from .fwdfilter import forward_scores
from .msvfilter import run_msv, run_msv_pair, run_ssv
from .vitfilter import emulate


class ReferenceEngine:
    """The numpy reference behind the engine interface."""

    memory_bytes = 80 * 10**9  # as an H100's: a worker's default shard budget is half of it

    def __init__(self, compute_capability=90, warps=64):
        self.compute_capability = compute_capability
        self._warps = warps

    def warps(self, warps_per_sm):
        return self._warps

    @staticmethod
    def holds(M):
        """Every model: numpy has no shared memory to fill."""
        return True

    def preload(self, lengths):
        """Nothing to load: the reference compiles nothing."""

    def tail(self, batch, timing=None):
        """The stages after the Forward filter have no numpy model here (the tests hold their
        oracle): every pair goes back to the tail queue for pyhmmer."""
        pairs = len(batch.pairs)
        return {
            "status": np.full(pairs, launch.CAPACITY, np.int32),
            "hits": np.zeros(pairs, launch.HIT_DTYPE),
            "records": np.zeros(0, np.uint8),
            "record_offsets": np.zeros(pairs + 1, np.int64),
        }

    def _tables(self, choice, model):
        values, fill = cost_rows(model, choice.arithmetic)
        return stripe_table(values, choice.striping, fill)

    def ssv(self, choice, blocks, models, sequences):
        return np.stack(
            [
                run_ssv(blocks, self._tables(choice, m), choice.striping, choice.arithmetic, m.bias, sequences)
                for m in models
            ]
        )

    def msv(self, choice, blocks, models, tjb, sequences):
        return np.stack(
            [
                run_msv(
                    blocks,
                    self._tables(choice, m),
                    choice.striping,
                    choice.arithmetic,
                    m,
                    tjb.astype(np.int32) + m.tbm,
                    sequences,
                )
                for m in models
            ]
        )

    def f1_sieve(self, groups, shard):
        """SSV and the F1 decision for every model × sequence of `groups` (choice, blocks,
        models, thresholds): flat indices (model · sequences + sequence, the models numbered
        across the groups) of the passing pairs, their MSV scores, and flat indices of the
        undecided."""
        outcomes, scores = [], []
        for choice, blocks, models, thresholds in groups:
            best = self.ssv(choice, blocks, models, shard.sequences)
            for model, row, threshold in zip(models, best, thresholds):
                outcome, score = f1_outcome(model, row, shard.tjb, shard.null1, shard.lengths, threshold)
                outcomes.append(outcome)
                scores.append(score)
        outcome, scores = np.concatenate(outcomes), np.concatenate(scores)
        passed = np.flatnonzero(outcome == F1_PASS)
        return passed, scores[passed], np.flatnonzero(outcome == F1_UNDECIDED)

    def msv_pairs(self, launches):
        results = []
        for _, models, sequences, batch in launches:
            residues, starts, lengths, tjb = sequences
            x_j = np.zeros(len(batch.pair_sequence), dtype=np.int16)
            for model, start, end in zip(batch.chunk_model, batch.chunk_start, batch.chunk_end):
                for position in range(start, end):
                    i = batch.pair_sequence[position]
                    x_j[position] = run_msv_pair(
                        models[model], residues[starts[i] : starts[i] + lengths[i]], int(tjb[i]) + models[model].tbm
                    )
            results.append(x_j)
        return results

    def bias(self, profiles, background_frequencies, sequences, pair_model, pair_sequence):
        residues, offsets = sequences
        scores = np.zeros(len(pair_model), dtype=np.float32)
        for model in models_present(pair_model):
            mine = np.flatnonzero(pair_model == model)
            pieces = [residues[offsets[i] : offsets[i + 1]] for i in pair_sequence[mine].tolist()]
            scores[mine] = bias_scores(profiles[model], background_frequencies, pieces)
        return scores, np.zeros(len(pair_model), dtype=bool)

    def viterbi(self, launches, timing=None):
        results = []
        for choice, profiles, sequences, batch in launches:
            residues, starts, lengths, _ = sequences
            xc = np.zeros(len(batch.pair_sequence), dtype=np.int32)
            status = np.zeros(len(batch.pair_sequence), dtype=np.uint8)
            for model, start, end in zip(batch.chunk_model, batch.chunk_start, batch.chunk_end):
                chosen = batch.pair_sequence[start:end].tolist()
                pieces = [residues[starts[i] : starts[i] + lengths[i]] for i in chosen]
                xc[start:end], status[start:end] = emulate(
                    profiles[model], choice.arithmetic, pieces, choice.striping.nodes
                )
            results.append((xc, status))
        return results

    def forward(self, launches, timing=None):
        results = []
        for _, profiles, sequences, batch in launches:
            residues, starts, lengths, _ = sequences
            scores = np.zeros(len(batch.pair_sequence))
            for model, start, end in zip(batch.chunk_model, batch.chunk_start, batch.chunk_end):
                chosen = batch.pair_sequence[start:end].tolist()
                pieces = [residues[starts[i] : starts[i] + lengths[i]] for i in chosen]
                scores[start:end] = forward_scores(profiles[model], pieces)
            results.append(scores)
        return results
