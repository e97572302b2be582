"""HMMER's filter stages for a batch of models against one resident shard, on an engine (the
GPU, or the numpy reference): `f1_filter` (SSV, then MSV where SSV cannot decide, then the F1
test), `viterbi_filter`, `forward_filter`, and `filter_stages`, which chains them with the bias
filter as `p7_Pipeline` does.

Models are grouped by kernel specialization (`tuning.choose`); one SSV launch covers a group ×
the whole shard, and the F1 decision runs where its output lies (on the GPU, kernels/f1.cu), so
only the passing pairs and the ones SSV cannot decide come back. The undecided pairs, a small
share, go through full MSV as a pair list. The bias and Viterbi filters take (model, sequence) pairs:
those past F1, then those the bias-corrected P-value leaves between F2 and F1; the Forward
filter takes the Viterbi survivors and passes those whose score, with a margin (`fwdfilter`),
passes F3.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time

import numpy as np

from ..stages import fwdfilter, msvfilter, vitfilter, vitlayout
from ..stages.msvlayout import build_warp_blocks
from . import tuning
from .pairs import models_present, pair_batch
from .reference import ReferenceEngine
from .reference.biasfilter import bias_scores


@dataclasses.dataclass
class FilterShard:
    """A shard as the filters see it: residues, per-sequence length terms, warp blocks by S."""

    residues: np.ndarray
    offsets: np.ndarray
    tjb: np.ndarray  # uint8 per sequence
    null1: np.ndarray  # float32 per sequence
    blocks: dict = dataclasses.field(default_factory=dict)
    pair_inputs: dict = dataclasses.field(default_factory=dict)
    # Tasks on several threads share a resident shard; its layouts are built once.
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def build(cls, residues, offsets, alphabet):
        tjb, null1 = msvfilter.LengthTerms.for_lengths(alphabet, np.diff(offsets)).lookup(np.diff(offsets))
        return cls(residues, offsets, tjb, null1)

    @property
    def sequences(self):
        return len(self.offsets) - 1

    @functools.cached_property
    def lengths(self):
        return np.diff(self.offsets)

    @functools.cached_property
    def _kernel_columns(self):
        """Residues, starts (int64) and lengths (int32) as the pair-list kernels read them."""
        return self.residues, self.offsets[:-1].astype(np.int64), self.lengths.astype(np.int32)

    @property
    def msv_sequences(self):
        return (*self._kernel_columns, self.tjb)

    def footprint(self):
        """Bytes of every array this shard has laid out (each also resident on a GPU). Taken from
        snapshots, without the lock that a thread laying out warp blocks holds for long."""
        laid_out, pair_inputs = list(self.blocks.values()), list(self.pair_inputs.values())
        arrays = [self.residues, self.offsets, self.tjb, self.null1]
        arrays += [array for inputs in pair_inputs for array in inputs]
        for blocks in laid_out:
            arrays += [
                blocks.block_start,
                blocks.heights,
                blocks.column_start,
                blocks.column_sequences,
                blocks.sequence_row,
            ]
        unique = {id(array): array.nbytes for array in arrays}  # the pair inputs share columns
        return sum(unique.values()) + sum(blocks.size for blocks in laid_out)

    def warp_blocks(self, S, warps):
        with self.lock:
            if (S, warps) not in self.blocks:
                self.blocks[(S, warps)] = build_warp_blocks(self.residues, self.offsets, S, warps)
            return self.blocks[(S, warps)]

    def viterbi_sequences(self, profile):
        """(residues, starts, lengths, MOVE words) as the Viterbi kernel reads them. The MOVE
        words depend only on the profile's scale and expected J uses, the same for every model
        of a search."""
        return self._pair_inputs(
            ("viterbi", profile.scale_w, profile.nj), lambda: vitlayout.sequence_moves(profile, self.lengths)
        )

    def forward_sequences(self, profile):
        """(residues, starts, lengths, MOVE probabilities) as the Forward kernel reads them."""
        return self._pair_inputs(("forward", profile.nj), lambda: fwdfilter.length_moves(profile.nj, self.lengths))

    def _pair_inputs(self, key, length_terms):
        with self.lock:
            if key not in self.pair_inputs:
                self.pair_inputs[key] = (*self._kernel_columns, length_terms())
            return self.pair_inputs[key]


@dataclasses.dataclass(frozen=True)
class F1Pairs:
    """The (model, sequence) pairs past F1, ordered by model then sequence, with their MSV scores
    (p7_MSVFilter's usc: float32 nats, +inf for an overflow); and the pairs SSV left to MSV."""

    pair_model: np.ndarray  # int64
    pair_sequence: np.ndarray  # int64
    scores: np.ndarray  # float32
    undecided_model: np.ndarray  # int64
    undecided_sequence: np.ndarray  # int64


def _by_choice(models, stage, compute_capability):
    groups = {}
    for position, model in enumerate(models):
        groups.setdefault(tuning.choose(model.M, stage, compute_capability), []).append(position)
    return groups


def f1_filter(engine, models, shard, F1, sieve_slots=None):
    """`p7_MSVFilter` + the F1 test for every model × every sequence of `shard`. `sieve_slots`
    (a context manager) is held while SSV runs, the one stage long enough to fill the GPU."""
    cc = engine.compute_capability
    limits = tuning.table_for(cc)
    for model in models:
        if model.base + model.bias > 255:
            raise ValueError(f"model {model.name}: base + bias > 255, outside the 16-bit MSV proof")
    thresholds = msvfilter.pass_thresholds([m.mu for m in models], [m.lam for m in models], F1)
    groups, order = [], []
    for choice, positions in _by_choice(models, "ssv", cc).items():
        blocks = shard.warp_blocks(choice.striping.S, engine.warps(limits["ssv"]["warps_per_sm"]))
        groups.append((choice, blocks, [models[p] for p in positions], thresholds[positions]))
        order += positions
    order = np.asarray(order, dtype=np.int64)
    with sieve_slots or contextlib.nullcontext():
        flat_passed, scores, flat_undecided = engine.f1_sieve(groups, shard)
    pair_model, pair_sequence = order[flat_passed // shard.sequences], flat_passed % shard.sequences
    undecided_model, undecided_sequence = order[flat_undecided // shard.sequences], flat_undecided % shard.sequences
    if len(undecided_model):
        x_j = msv_pair_filter(engine, models, shard, undecided_model, undecided_sequence)
        base = np.array([m.base for m in models])[undecided_model]
        scale = np.array([m.scale for m in models], dtype=np.float32)[undecided_model]
        full = msvfilter.scores_from_xj(base, scale, x_j, shard.tjb[undecided_sequence])
        full[x_j == msvfilter.MSV_OVERFLOW] = np.inf
        wins = msvfilter.score_bits(full, shard.null1[undecided_sequence]) >= thresholds[undecided_model]
        pair_model = np.concatenate([pair_model, undecided_model[wins]])
        pair_sequence = np.concatenate([pair_sequence, undecided_sequence[wins]])
        scores = np.concatenate([scores, full[wins]])
    # One int64 key, not np.lexsort: the pairs come in runs already sorted (a model's sequences
    # ascending), which a stable sort of one key merges several times faster.
    order = np.argsort(pair_model * shard.sequences + pair_sequence, kind="stable")
    return F1Pairs(pair_model[order], pair_sequence[order], scores[order], undecided_model, undecided_sequence)


def _pairs_of(pair_model, member_lists, among=None):
    """For each list of models: the positions of the pairs (of those `among`, a mask, if given)
    whose model is in the list, ascending, and each one's model as a position in the list."""
    group_of = np.full(int(pair_model.max(initial=-1)) + 1, -1, dtype=np.int64)
    local_of = np.zeros(len(group_of), dtype=np.int64)
    for group, members in enumerate(member_lists):
        group_of[members] = group
        local_of[members] = np.arange(len(members))
    pair_group = group_of[pair_model]
    if among is not None:
        pair_group = np.where(among, pair_group, -1)
    order = np.argsort(pair_group, kind="stable")
    bounds = np.searchsorted(pair_group[order], np.arange(len(member_lists) + 1))
    return [(order[a:b], local_of[pair_model[order[a:b]]]) for a, b in zip(bounds[:-1], bounds[1:])]


#: Residues per warp group in one chunk: enough to amortize loading a model's table into a CTA.
CHUNK_RESIDUES_PER_GROUP = 4000


def msv_pair_filter(engine, models, shard, pair_model, pair_sequence):
    """Full `p7_MSVFilter` for (model, sequence) pairs of `shard`: the final xJ, or
    msvfilter.MSV_OVERFLOW. Models too long for the pair kernel are run by the numpy reference."""
    x_j = np.zeros(len(pair_model), dtype=np.int16)
    groups, too_long = {}, []
    for m in models_present(pair_model):
        choice = tuning.choose_msv_pairs(models[m].M, engine.compute_capability)
        if choice is None:
            too_long.append(m)
        else:
            groups.setdefault(choice, []).append(m)
    launches, selections = [], []
    (*by_group, (on_host, on_host_local)) = _pairs_of(pair_model, [*groups.values(), too_long])
    for (choice, members), (selected, local) in zip(groups.items(), by_group):
        batch = pair_batch(local, pair_sequence[selected], shard.lengths, choice[1] * CHUNK_RESIDUES_PER_GROUP)
        launches.append((choice, [models[m] for m in members], shard.msv_sequences, batch))
        selections.append(selected)
    if too_long:
        batch = pair_batch(on_host_local, pair_sequence[on_host], shard.lengths, CHUNK_RESIDUES_PER_GROUP)
        (found,) = ReferenceEngine().msv_pairs([(None, [models[m] for m in too_long], shard.msv_sequences, batch)])
        x_j[on_host[batch.pair_order]] = found
    for (*_, batch), selected, found in zip(launches, selections, engine.msv_pairs(launches)):
        x_j[selected[batch.pair_order]] = found
    return x_j


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
    base_w = np.array([profile.base_w for profile in profiles], dtype=np.float32)
    scale_w = np.array([profile.scale_w for profile in profiles], dtype=np.float32)
    for arithmetic in ("vit16", "vit32"):
        groups = {}
        for m in models_present(pair_model[pending]):
            if arithmetic == "vit16" and not vitlayout.lanes16_supported(profiles[m]):
                continue
            choice = tuning.choose_viterbi(profiles[m].M, arithmetic, engine.compute_capability)
            if choice is not None:
                groups.setdefault(choice, []).append(m)
        launches, selections = [], []
        for (choice, members), (selected, local) in zip(
            groups.items(), _pairs_of(pair_model, list(groups.values()), pending)
        ):
            sequences = shard.viterbi_sequences(profiles[members[0]])
            residues = choice.cta_warps * choice.striping.S * CHUNK_RESIDUES_PER_GROUP
            batch = pair_batch(local, pair_sequence[selected], shard.lengths, residues)
            launches.append((choice, [profiles[m] for m in members], sequences, batch))
            selections.append(selected)
        for (_, _, sequences, batch), selected, (xc, status) in zip(
            launches, selections, engine.viterbi(launches, timing)
        ):
            pairs = selected[batch.pair_order]
            done = status != vitlayout.NEEDS_EXACT
            model_of = pair_model[pairs[done]]
            scores[pairs[done]] = vitlayout.scores_from_xc(
                base_w[model_of], scale_w[model_of], xc[done], sequences[3][batch.pair_sequence[done]], status[done]
            )
            pending[pairs[done]] = False
    return scores


def forward_filter(engine, profiles, shard, pair_model, pair_sequence, timing=None):
    """`p7_ForwardParser` scores (float64 nats, to rounding) for (model, sequence) pairs of
    `shard`; NaN where a model is too large for the kernel (the caller passes those on)."""
    pair_model = np.asarray(pair_model, dtype=np.int64)
    pair_sequence = np.asarray(pair_sequence, dtype=np.int64)
    scores = np.full(len(pair_model), np.nan)
    groups = {}
    for m in models_present(pair_model):
        choice = tuning.choose_forward(profiles[m].M, engine.compute_capability)
        if choice is not None:
            groups.setdefault(choice, []).append(m)
    launches, selections = [], []
    for (choice, members), (selected, local) in zip(groups.items(), _pairs_of(pair_model, list(groups.values()))):
        batch = pair_batch(local, pair_sequence[selected], shard.lengths, choice.cta_warps * CHUNK_RESIDUES_PER_GROUP)
        launches.append((choice, [profiles[m] for m in members], shard.forward_sequences(profiles[members[0]]), batch))
        selections.append(selected)
    for (*_, batch), selected, found in zip(launches, selections, engine.forward(launches, timing)):
        scores[selected[batch.pair_order]] = found
    return scores


@dataclasses.dataclass(frozen=True)
class FilterOutcome:
    """One model's filter outcome on a shard: the sequences (int64 indices, ascending) past each
    GPU stage."""

    passed_msv: np.ndarray  # exactly HMMER's
    passed_bias: np.ndarray  # exactly HMMER's
    survivors: np.ndarray  # a superset of HMMER's Forward passers
    # Sequences past HMMER's Viterbi filter that the Forward filter stopped: pyhmmer, which sees
    # only the survivors, leaves them out of its count past Viterbi.
    stopped_after_viterbi: np.ndarray
    # Per survivor: its filter score (the bias filter's, or null1), float32, and whether Viterbi
    # left it unscored (so that only pyhmmer can say whether it passes Viterbi).
    survivor_filter_scores: np.ndarray
    survivor_unscored: np.ndarray


def filter_stages(
    engine,
    models,
    profiles,
    forward_profiles,
    background_frequencies,
    shard,
    F1,
    F2,
    F3,
    bias_filter,
    timings=None,
    sieve_slots=None,
):
    """MSV, bias, Viterbi and Forward filters for every model × every sequence of `shard`, as
    `p7_Pipeline` decides them (the Forward filter conservatively). `models` are msvfilter.MsvModel,
    `profiles` vitfilter.ViterbiProfile and `forward_profiles` fwdfilter.ForwardProfile, one
    each per model. `timings` (a dict) collects seconds per stage; `sieve_slots` as `f1_filter`'s."""
    timings = {} if timings is None else timings
    started = time.perf_counter()
    first = f1_filter(engine, models, shard, F1, sieve_slots)
    timings["msv"] = timings.get("msv", 0.0) + time.perf_counter() - started
    pair_model, pair_sequence, msv_scores = first.pair_model, first.pair_sequence, first.scores
    started = time.perf_counter()
    if bias_filter:
        scores, uncertain = engine.bias(
            profiles, background_frequencies, (shard.residues, shard.offsets), pair_model, pair_sequence
        )
        pieces = {i: shard.residues[shard.offsets[i] : shard.offsets[i + 1]] for i in pair_sequence[uncertain].tolist()}
        filter_scores = resolve_uncertain(
            scores, uncertain, pair_model, pair_sequence, profiles, background_frequencies, pieces
        )
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

    started = time.perf_counter()
    # Pairs Viterbi could not score go on to pyhmmer as they are: it counts them past Viterbi.
    survivors = stage.passed_viterbi.copy()
    if F3 < 1.0:
        forward = stage.passed_viterbi & ~stage.unscored
        chosen_model, chosen_sequence = pair_model[forward], pair_sequence[forward]
        lengths = shard.lengths[chosen_sequence]
        nodes = np.array([p.M for p in forward_profiles], dtype=np.int64)[chosen_model]
        timings["forward_cells"] = timings.get("forward_cells", 0) + int((lengths * nodes).sum())
        kernel_seconds = []
        scores = forward_filter(engine, forward_profiles, shard, chosen_model, chosen_sequence, kernel_seconds)
        timings["forward_kernel"] = timings.get("forward_kernel", 0.0) + sum(kernel_seconds)
        tau = np.array([p.tau for p in forward_profiles])[chosen_model]
        lam = np.array([p.lam for p in forward_profiles])[chosen_model]
        survivors[forward] = fwdfilter.passes_f3(
            scores, filter_scores[forward], tau, lam, F3, fwdfilter.margin_nats(lengths, nodes)
        )
    timings["forward"] = timings.get("forward", 0.0) + time.perf_counter() - started

    results = []
    bounds = np.searchsorted(pair_model, np.arange(len(models) + 1))
    for span in (slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])):  # pairs by model, then sequence
        sequences, kept = pair_sequence[span], survivors[span]
        results.append(
            FilterOutcome(
                passed_msv=sequences,
                passed_bias=sequences[stage.passed_bias[span]],
                survivors=sequences[kept],
                stopped_after_viterbi=sequences[stage.passed_viterbi[span] & ~kept],
                survivor_filter_scores=np.asarray(filter_scores[span][kept], dtype=np.float32),
                survivor_unscored=stage.unscored[span][kept],
            )
        )
    return results


def resolve_uncertain(scores, uncertain, pair_model, pair_sequence, profiles, background_frequencies, sequences):
    """The kernel's scores with every flagged pair rescored by `bias_scores`.

    `pair_model` and `pair_sequence` index `profiles` and `sequences` (digital residue arrays).
    """
    scores = np.array(scores, dtype=np.float32, copy=True)
    flagged = np.flatnonzero(np.asarray(uncertain))
    pair_model = np.asarray(pair_model)[flagged]
    pair_sequence = np.asarray(pair_sequence)[flagged]
    for model in np.unique(pair_model):
        mine = pair_model == model
        targets = [sequences[s] for s in pair_sequence[mine]]
        scores[flagged[mine]] = bias_scores(profiles[model], background_frequencies, targets)
    return scores
