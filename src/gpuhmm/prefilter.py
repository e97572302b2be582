"""HMMER's filter stages for a batch of models against one resident shard, on an engine (the
GPU, or the numpy reference): `f1_filter` (SSV, then MSV where SSV cannot decide, then the F1
test), `viterbi_filter`, and `filter_stages`, which chains them with the bias filter as
`p7_Pipeline` does.

Models are grouped by kernel specialization (`tuning.choose`); one launch covers a group ×
the whole shard. Sequences that SSV leaves undecided for any model of the batch are laid
out again in a small set of warp blocks and go through full MSV together. The bias and Viterbi
filters take (model, sequence) pairs: those past F1, then those the bias-corrected P-value
leaves between F2 and F1.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np

from . import biasfilter, msv, reference, tuning, vitfilter, vitlayout
from .warpblocks import build_warp_blocks, stripe_table, cost_rows


@dataclasses.dataclass
class FilterShard:
    """A shard as the filters see it: residues, per-sequence length terms, warp blocks by S."""

    residues: np.ndarray
    offsets: np.ndarray
    tjb: np.ndarray  # uint8 per sequence
    null1: np.ndarray  # float32 per sequence
    blocks: dict = dataclasses.field(default_factory=dict)
    viterbi_inputs: dict = dataclasses.field(default_factory=dict)
    # Tasks on several threads share a resident shard; its layouts are built once.
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

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
        with self.lock:
            if (S, warps) not in self.blocks:
                self.blocks[(S, warps)] = build_warp_blocks(self.residues, self.offsets, S, warps)
            return self.blocks[(S, warps)]

    def viterbi_sequences(self, profile):
        """(residues, starts, lengths, moves) as the Viterbi kernel reads them. The MOVE words
        depend only on the profile's scale and expected J uses, the same for every model of a
        search, so they are kept per (scale, nj)."""
        key = (profile.scale_w, profile.nj)
        with self.lock:
            if key not in self.viterbi_inputs:
                moves = vitlayout.sequence_moves(profile, self.lengths)
                self.viterbi_inputs[key] = (self.residues, self.offsets[:-1].astype(np.int64), self.lengths.astype(np.int32), moves)
            return self.viterbi_inputs[key]

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


    def bias(self, profiles, background_frequencies, sequences, pair_model, pair_sequence):
        residues, offsets = sequences
        scores = np.zeros(len(pair_model), dtype=np.float32)
        for model in np.unique(pair_model).tolist():
            mine = np.flatnonzero(pair_model == model)
            pieces = [residues[offsets[i]:offsets[i + 1]] for i in pair_sequence[mine].tolist()]
            scores[mine] = vitfilter.bias_scores(profiles[model], background_frequencies, pieces)
        return scores, np.zeros(len(pair_model), dtype=bool)

    def viterbi(self, launches, timing=None):
        results = []
        for choice, profiles, sequences, batch in launches:
            residues, starts, lengths, _ = sequences
            xc = np.zeros(len(batch.pair_sequence), dtype=np.int32)
            status = np.zeros(len(batch.pair_sequence), dtype=np.uint8)
            for model, start, end in zip(batch.chunk_model, batch.chunk_start, batch.chunk_end):
                chosen = batch.pair_sequence[start:end].tolist()
                pieces = [residues[starts[i]:starts[i] + lengths[i]] for i in chosen]
                xc[start:end], status[start:end] = vitlayout.emulate(profiles[model], choice.arithmetic, pieces, choice.striping.nodes)
            results.append((xc, status))
        return results


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
        passed = msv.passes_f1(model, scores, shard.null1, F1) & nonempty
        results.append(F1Result(scores, passed, undecided[i]))
    return results


#: Residues per warp group in one chunk: enough to amortize loading a model's table into a CTA.
CHUNK_RESIDUES_PER_GROUP = 4000


def viterbi_filter(engine, profiles, shard, pair_model, pair_sequence, timing=None):
    """`p7_ViterbiFilter` scores (nats, +inf on overflow) for (model, sequence) pairs of `shard`.

    Vit16 lanes first, for the models they support; then Vit32 for the pairs Vit16 could not
    vouch for and the other models. NaN where a model is too large for the kernel (the caller
    passes those on). With `timing` (a list), kernel seconds are appended.
    """
    pair_model = np.asarray(pair_model, dtype=np.int64)
    pair_sequence = np.asarray(pair_sequence, dtype=np.int64)
    scores = np.full(len(pair_model), np.nan, dtype=np.float32)
    pending = np.ones(len(pair_model), dtype=bool)
    for arithmetic in ("vit16", "vit32"):
        groups = {}
        for m in np.unique(pair_model[pending]).tolist():
            if arithmetic == "vit16" and not vitlayout.lanes16_supported(profiles[m]):
                continue
            choice = tuning.choose_viterbi(profiles[m].M, arithmetic, engine.compute_capability)
            if choice is not None:
                groups.setdefault(choice, []).append(m)
        launches, selections = [], []
        for choice, members in groups.items():
            selected = np.flatnonzero(pending & np.isin(pair_model, members))
            local = np.searchsorted(members, pair_model[selected])
            sequences = shard.viterbi_sequences(profiles[members[0]])
            residues = choice.cta_warps * choice.striping.S * CHUNK_RESIDUES_PER_GROUP
            batch = vitlayout.pair_batch(local, pair_sequence[selected], shard.lengths, residues)
            launches.append((choice, [profiles[m] for m in members], sequences, batch))
            selections.append((selected, local, members))
        for (choice, _, sequences, batch), (selected, local, members), (xc, status) in zip(
                launches, selections, engine.viterbi(launches, timing)):
            pairs = selected[batch.pair_order]
            done = status != vitlayout.NEEDS_EXACT
            model_of = local[batch.pair_order]
            for i, m in enumerate(members):
                mine = done & (model_of == i)
                scores[pairs[mine]] = vitlayout.scores_from_xc(
                    profiles[m], xc[mine], sequences[3][batch.pair_sequence[mine]], status[mine])
            pending[pairs[done]] = False
    return scores


@dataclasses.dataclass(frozen=True)
class FilterCounts:
    """One model's filter outcome on a shard: the sequences past each GPU stage."""

    passed_msv: np.ndarray  # bool per sequence, exactly HMMER's
    passed_bias: np.ndarray  # bool per sequence, exactly HMMER's
    survivors: np.ndarray  # bool per sequence: past Viterbi, a superset of HMMER's where unscored


def filter_stages(engine, models, profiles, background_frequencies, shard, F1, F2, bias_filter, timings=None):
    """MSV, bias and Viterbi filters for every model × every sequence of `shard`, as `p7_Pipeline`
    decides them. `timings` (a dict) collects seconds per stage."""
    timings = {} if timings is None else timings
    started = time.perf_counter()
    first = f1_filter(engine, models, shard, F1)
    timings["msv"] = timings.get("msv", 0.0) + time.perf_counter() - started
    passed = [np.flatnonzero(result.passed) for result in first]
    pair_model = np.repeat(np.arange(len(models)), [len(p) for p in passed])
    pair_sequence = np.concatenate(passed) if passed else np.zeros(0, np.int64)
    msv_scores = np.concatenate([r.scores[p] for r, p in zip(first, passed)]) if passed else np.zeros(0, np.float32)
    started = time.perf_counter()
    if bias_filter:
        scores, uncertain = engine.bias(profiles, background_frequencies, (shard.residues, shard.offsets), pair_model, pair_sequence)
        pieces = {i: shard.residues[shard.offsets[i]:shard.offsets[i + 1]] for i in pair_sequence[uncertain].tolist()}
        filter_scores = biasfilter.resolve_uncertain(scores, uncertain, pair_model, pair_sequence, profiles,
                                                     background_frequencies, pieces)
    else:
        filter_scores = shard.null1[pair_sequence]
    timings["bias"] = timings.get("bias", 0.0) + time.perf_counter() - started
    kernel_seconds = []

    def viterbi(mask):
        lengths = shard.lengths[pair_sequence[mask]]
        nodes = np.array([p.M for p in profiles], dtype=np.int64)[pair_model[mask]]
        timings["viterbi_cells"] = timings.get("viterbi_cells", 0) + int((lengths * nodes).sum())
        return viterbi_filter(engine, profiles, shard, pair_model[mask], pair_sequence[mask], kernel_seconds)

    started = time.perf_counter()
    msv_gumbel = (np.array([m.mu for m in models])[pair_model], np.array([m.lam for m in models])[pair_model])
    vit_gumbel = (np.array([p.mu for p in profiles])[pair_model], np.array([p.lam for p in profiles])[pair_model])
    stage = vitfilter.second_stage(msv_scores, filter_scores, msv_gumbel, viterbi, vit_gumbel, F1, F2)
    timings["viterbi"] = timings.get("viterbi", 0.0) + time.perf_counter() - started
    timings["viterbi_kernel"] = timings.get("viterbi_kernel", 0.0) + sum(kernel_seconds)
    results, start = [], 0
    for chosen in passed:  # the pairs are grouped by model, in model order
        span = slice(start, start + len(chosen))
        start = span.stop
        masks = []
        for sequences in (chosen, chosen[stage.passed_bias[span]], chosen[stage.passed_viterbi[span]]):
            mask = np.zeros(shard.sequences, dtype=bool)
            mask[sequences] = True
            masks.append(mask)
        results.append(FilterCounts(*masks))
    return results
