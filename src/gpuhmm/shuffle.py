"""Pairwise statistical significance by shuffling (`--shuffle N`), after the GPU-PSSE paper.

For every reported hit (model, target), the target is shuffled N times. The shuffle is a
uniform random permutation of its residues (Fisher–Yates), so each shuffle keeps the target's
exact residue composition and length. Each shuffle, and the target itself, is scored with the
model's `p7_ViterbiFilter` score: on the GPU by the engine's kernel, on the CPU by compiled code
(`engine.vitcpu`), hits in parallel. Both give the numpy reference's scores bit for bit, so their
fits and P-values are identical too. A Gumbel is fitted to the N shuffled scores by censored
maximum likelihood, on the upper half of the scores (the lower half counts only as being below
the median). The empirical P-value of the hit is the fitted Gumbel's P(S ≥ score of the target);
a target whose Viterbi-filter score overflows (+inf, as in HMMER) gets 0.

Shuffles are drawn from numpy's PCG64, seeded with (--seed, model position, target file
position), so a table depends only on the seed, never on sharding or threads.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
import time

import numpy as np
import pyhmmer.plan7

from .engine import vitcpu
from .engine.filters import FilterShard, viterbi_filter
from .engine.reference.vitfilter import viterbi_scores
from .hits import underflow
from .hits.text import hit_text, text_of, view
from .stages import msvfilter, vitfilter
from .worker import STATE

log = logging.getLogger("gpuhmm")

#: Shuffled residues scored per engine call: bounds the memory of one batch.
BATCH_RESIDUES = 20_000_000
#: How often long shuffles report progress, at most (as a search does).
PROGRESS_SECONDS = 10.0


def shuffles(codes, count, seed, model_position, target_position):
    """`count` composition-preserving shuffles of `codes` (uint8 residues), (count, L)."""
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, model_position, target_position])))
    return generator.permuted(np.broadcast_to(np.asarray(codes, dtype=np.uint8), (count, len(codes))), axis=1)


def fit_censored_gumbel(scores):
    """(mu, lambda) of the Gumbel that maximizes the likelihood of the scores above their
    median, given how many lie at or below it (type I censoring at the median).

    With z scores censored at phi and the others x_i, dL/dmu = 0 gives mu as a function of
    lambda, and dL/dlambda = 0 then reduces to one equation in lambda,
        1/lambda - mean(x) + (z phi e^(-lambda phi) + sum x_i e^(-lambda x_i))
                             / (z e^(-lambda phi) + sum e^(-lambda x_i)) = 0,
    decreasing in lambda; it is solved by bisection.
    """
    scores = np.sort(np.asarray(scores, dtype=np.float64))
    scores = scores[np.isfinite(scores)]
    if len(scores) < 4 or scores[-1] == scores[0]:
        return math.nan, math.nan
    phi = float(np.median(scores))
    observed = scores[scores > phi]
    censored = len(scores) - len(observed)
    if len(observed) < 2:
        return math.nan, math.nan
    mean = observed.mean()

    def weighted(lam):
        # Every term is multiplied by e^(lam phi), so none can overflow: the censored ones become 1.
        weights = np.exp(-lam * (observed - phi))
        total = censored + weights.sum()
        return total, (censored * phi + (observed * weights).sum()) / total

    def equation(lam):
        return 1.0 / lam - mean + weighted(lam)[1]

    low, high = 1e-6, 1.0
    while equation(high) > 0 and high < 1e6:
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if equation(middle) > 0:
            low = middle
        else:
            high = middle
    lam = 0.5 * (low + high)
    total, _ = weighted(lam)
    mu = phi - math.log(total / len(observed)) / lam
    return mu, lam


def gumbel_pvalue(score, mu, lam):
    """P(S >= score) for a Gumbel(mu, lambda); 0 for a score that overflowed (+inf)."""
    if not math.isfinite(mu) or not math.isfinite(lam):
        return math.nan
    if math.isinf(score):
        return 0.0
    return -math.expm1(-math.exp(-lam * (score - mu)))


class _Progress:
    """The shuffles' progress lines: at most every PROGRESS_SECONDS, and once every hit is scored."""

    def __init__(self, hits, cells):
        self.hits, self.cells = hits, cells
        self.done_hits, self.done_cells = 0, 0
        self.started = self.reported = time.perf_counter()

    def advance(self, hits, cells):
        self.done_hits += hits
        self.done_cells += cells
        now = time.perf_counter()
        if self.done_hits == self.hits or now - self.reported >= PROGRESS_SECONDS:
            self.reported = now
            fraction = self.done_cells / self.cells if self.cells else 1.0
            elapsed = now - self.started
            log.info(
                "shuffles: %d/%d hits, %.0f%% of cells, %.2f GCUPS, elapsed %.0fs, ETA %.0fs",
                self.done_hits,
                self.hits,
                100 * fraction,
                self.done_cells / max(elapsed, 1e-9) / 1e9,
                elapsed,
                elapsed * (1 - fraction) / fraction if fraction else math.nan,
            )


def significance_rows(engine, assessed, targets, count, seed, alphabet, threads=1):
    """The table's rows (output.tables.SHUFFLE_COLUMNS) for every reported hit, models in order, hits
    as reported.

    `assessed` lists (model position, its TopHits, its ViterbiProfile) for the models with
    reported hits; targets(name, length) gives a reported target's (digital residues, file
    position). `engine` scores on the GPU (or its numpy reference); None scores with the compiled
    CPU Viterbi filter on `threads` threads."""
    profiles = [profile for _, _, profile in assessed]
    work = []
    for index, (model_position, model_hits, _) in enumerate(assessed):
        for hit in model_hits.reported:
            codes, file_position = targets(hit_text(hit)[0], hit.length)
            work.append((index, model_position, model_hits, hit, codes, file_position))
    cells = [(count + 1) * profiles[item[0]].M * len(item[4]) for item in work]
    progress = _Progress(len(work), sum(cells))
    if engine is None:
        return _score_on_cpu(work, cells, profiles, count, seed, alphabet, threads, progress)
    rows, batch, batch_residues, batch_cells = [], [], 0, 0
    for item, item_cells in zip(work, cells):
        residues = (count + 1) * len(item[4])
        if batch and batch_residues + residues > BATCH_RESIDUES:
            rows += _score_batch(engine, batch, profiles, count, seed, alphabet)
            progress.advance(len(batch), batch_cells)
            batch, batch_residues, batch_cells = [], 0, 0
        batch.append(item)
        batch_residues += residues
        batch_cells += item_cells
    if batch:
        rows += _score_batch(engine, batch, profiles, count, seed, alphabet)
        progress.advance(len(batch), batch_cells)
    return rows


def _score_on_cpu(work, cells, profiles, count, seed, alphabet, threads, progress):
    """Each hit's target and its shuffles through the compiled Viterbi filter, a hit per task.
    The C calls release the GIL, so `threads` tasks run at once."""
    lengths = [len(item[4]) for item in work]
    _, null1 = msvfilter.LengthTerms.for_lengths(alphabet, lengths).lookup(lengths)
    vitcpu.compiled()  # built (or found missing) once, before the threads ask for it

    def score(item):
        profile_index, model_position, _, _, codes, file_position = item
        codes = np.asarray(codes, dtype=np.uint8)
        sequences = np.concatenate([codes[None, :], shuffles(codes, count, seed, model_position, file_position)])
        return vitcpu.scores(profiles[profile_index], sequences)

    pool = concurrent.futures.ThreadPoolExecutor(max(1, threads), thread_name_prefix="gpuhmm-shuffle")
    rows = []
    try:
        futures = [pool.submit(score, item) for item in work]
        for item, future, item_null1, item_cells in zip(work, futures, null1, cells):
            bits = (future.result().astype(np.float64) - np.float64(item_null1)) / math.log(2)
            rows.append(_row(item, bits[0], bits[1:], count))
            progress.advance(1, item_cells)
    finally:
        # An interrupt or error stops the hits not yet started; those running end within a hit.
        pool.shutdown(wait=True, cancel_futures=True)
    return rows


def _score_batch(engine, work, profiles, count, seed, alphabet):
    """Each hit's target and its shuffles as one shard; one Viterbi pair list over all of them."""
    pieces, pair_model = [], []
    for profile_index, model_position, _, _, codes, file_position in work:
        pieces.append(np.asarray(codes, dtype=np.uint8)[None, :])
        pieces.append(shuffles(codes, count, seed, model_position, file_position))
        pair_model += [profile_index] * (count + 1)
    lengths = np.concatenate([np.full(len(piece), piece.shape[1]) for piece in pieces])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    residues = np.concatenate([piece.reshape(-1) for piece in pieces])
    shard = FilterShard.build(residues, offsets, alphabet)
    pair_model = np.array(pair_model)
    scores = viterbi_filter(engine, profiles, shard, pair_model, np.arange(len(pair_model)))
    # Models too large for the kernel (NaN) are scored by the numpy model of vitfilter.c.
    for profile_index in np.unique(pair_model[np.isnan(scores)]).tolist():
        pairs = np.flatnonzero(np.isnan(scores) & (pair_model == profile_index))
        scores[pairs] = viterbi_scores(
            profiles[profile_index], [residues[offsets[pair] : offsets[pair + 1]] for pair in pairs.tolist()]
        )
    bits = (scores.astype(np.float64) - shard.null1.astype(np.float64)) / math.log(2)
    return [
        _row(item, bits[index * (count + 1)], bits[index * (count + 1) + 1 : (index + 1) * (count + 1)], count)
        for index, item in enumerate(work)
    ]


def _row(item, own, shuffled, count):
    """One hit's row: its target's Viterbi-filter bits `own`, and the fit to its `shuffled` bits."""
    _, _, model_hits, hit, _, _ = item
    mu, lam = fit_censored_gumbel(shuffled)
    name, accession, _ = map(view, hit_text(hit))
    query_name, query_accession, _ = map(view, text_of(model_hits.query))
    return (
        name,
        accession or "-",
        query_name,
        query_accession or "-",
        f"{underflow.evalue(hit.pvalue, model_hits.Z):.2g}",
        f"{hit.score:.1f}",
        f"{own:.2f}",
        count,
        f"{mu:.4f}",
        f"{lam:.4f}",
        f"{gumbel_pvalue(own, mu, lam):.3g}",
    )


def significance(models, hits_by_model, database, count, seed, backend, threads=1):
    """The shuffle significance rows (`shuffle`) of every reported hit, scored on this process's
    GPU engine, or on the CPU backend by the compiled Viterbi filter on `threads` threads."""
    engine = STATE.engine() if backend == "gpu" else None
    positions = [position for position, model_hits in enumerate(hits_by_model) if len(model_hits.reported)]
    hits = sum(len(hits_by_model[position].reported) for position in positions)
    where = "the GPU" if engine is not None else f"the CPU, {max(1, threads)} thread(s)"
    log.info("shuffles: %d hit(s) × %d shuffles, scored on %s", hits, count, where)
    profiles = vitfilter.viterbi_profiles([models[p] for p in positions], pyhmmer.plan7.Background(database.alphabet))
    assessed = [(position, hits_by_model[position], profile) for position, profile in zip(positions, profiles)]
    wanted = {(hit_text(hit)[0], hit.length) for model_hits in hits_by_model for hit in model_hits.reported}
    found = {}
    for index in range(len(database.shards)):
        shard = database.load_shard(index)
        lengths, source_index = shard.lengths.tolist(), shard.source_index.tolist()
        for position, name in enumerate(shard.names):
            key = (name, lengths[position])
            # The first in file order, as `ResidentShard.file_position` takes.
            if key in wanted and (key not in found or source_index[position] < found[key][1]):
                found[key] = (
                    shard.residues[shard.offsets[position] : shard.offsets[position + 1]],
                    source_index[position],
                )
    return significance_rows(
        engine, assessed, lambda name, length: found[(name, length)], count, seed, database.alphabet, threads
    )
