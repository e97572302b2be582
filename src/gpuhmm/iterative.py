"""jackhmmer's iterative search (`src/jackhmmer.c` of HMMER 3.4), over any search of its models.

Each query's first round searches with HMMER's single-sequence model of it (as phmmer's); each
later round builds a model from the alignment of the previous round's included domains with
the query itself (`p7_tophits_Alignment` with the query's faux trace, then `p7_Builder` with
hand architecture: the alignment keeps every consensus column, so the model keeps the query's
length). A query converges when a round includes no target that the previous round did not,
and its alignment did not grow; it stops after `max_iterations` rounds otherwise.

The search itself is a callable given the round's models (one per query still iterating) and
its number, returning each model's hits over the whole database: the queries iterate side by
side, each round of all of them one search, which gives each query the rounds jackhmmer runs
one query after the other. The builder reseeds its generator for every model it calibrates
(seed ≠ 0), so neither the order the models are built in nor which copy of the builder builds
one changes them: a round's models are built on several threads, each with its own copy, as
calibrating a model takes longer than searching a small database with it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import threading
import time

import pyhmmer.easel
import pyhmmer.plan7

from .db.models import loggable_argv
from .errors import GpuhmmError
from .hits.text import text_of

#: The comment p7_SingleBuilder gives a query's model (`src/seqmodel.c`); pyhmmer's builder leaves "-".
SINGLE_SEQUENCE_COMMENT = "[HMM created from a query sequence]"

#: jackhmmer's `-A` and `--chkali` author line.
AUTHOR = "jackhmmer (HMMER 3.4)"


def new_builder(settings, alphabet, seed, first_round):
    """The one builder of a run, as jackhmmer's p7_builder_Create makes it: `settings` (a
    `JackhmmerOptions`) for later rounds' models, `first_round`'s score system and calibration,
    and `seed`."""
    return pyhmmer.plan7.Builder(alphabet, seed=seed, **settings.builder_arguments(), **first_round.builder_arguments())


@dataclasses.dataclass
class Round:
    """One round of one query: the model searched, its hits (ranked, marked new or dropped
    against the previous round), the alignment they give, and what the report says of them."""

    number: int
    hmm: pyhmmer.plan7.HMM
    hits: pyhmmer.plan7.TopHits
    msa: pyhmmer.easel.DigitalMSA
    new_targets: int  # included now, not in the previous round
    previous_sequences: int  # the alignment this round's model came from (1: the query alone)
    previous_targets: int  # targets the previous round included (its ranking's keys)
    converged: bool
    watch: tuple = (0.0, 0.0, 0.0)  # this query's share of the round's user, system and wall seconds


@dataclasses.dataclass
class Query:
    """One query sequence and its rounds so far."""

    sequence: pyhmmer.easel.DigitalSequence
    position: int  # in the query file, from 0, empty sequences counted (jackhmmer's nquery - 1)
    rounds: list = dataclasses.field(default_factory=list)
    ranking: pyhmmer.easel.KeyHash = dataclasses.field(default_factory=pyhmmer.easel.KeyHash)

    @property
    def finished(self):
        return bool(self.rounds) and self.rounds[-1].converged


def queries_of(sequences):
    """The `Query` of each sequence with residues: jackhmmer skips an empty one, though it
    counts it as a query (which decides what opens the tables and checkpoints)."""
    return [Query(sequence, position) for position, sequence in enumerate(sequences) if len(sequence)]


def first_models(queries, builder, threads=1):
    """The first round's models: HMMER's single-sequence model of each query."""
    return _built(queries, builder, threads, _single_sequence_model)


def iterate(queries, models, builder, search, settings, threads=1):
    """Run every query's rounds, the first with `models` (`first_models`); `search(models,
    number)` gives each model's merged hits over the database in round `number`, and `settings`
    is a `JackhmmerOptions`. Later rounds' models are built on `threads` threads. Returns
    `queries`, their rounds filled in."""
    active = list(queries)
    for number in range(1, settings.max_iterations + 1):
        if not active:
            break
        if number > 1:
            models = _built(active, builder, threads, _model)
        started, cpu = time.perf_counter(), os.times()
        found = search(models, number)
        rounds = [
            _finish_round(query, number, hmm, hits, settings.seq_limit)
            for query, hmm, hits in zip(active, models, found)
        ]
        _share_time(rounds, started, cpu)
        for query, done in zip(active, rounds):
            query.rounds.append(done)
        active = [query for query in active if not query.finished]
    return queries


def _built(queries, builder, threads, build):
    """build(query, builder, background) of each query, on up to `threads` threads, each with
    its own copy of `builder` and of the null model (calibration sets its length). pyhmmer's
    `Builder.copy` resets the score matrix to BLOSUM62, so each copy is given the original's."""
    if threads <= 1 or len(queries) <= 1:
        background = pyhmmer.plan7.Background(builder.alphabet)
        with loggable_argv():
            return [build(query, builder, background) for query in queries]
    own = threading.local()

    def one(query):
        if not hasattr(own, "builder"):
            own.builder, own.background = builder.copy(), pyhmmer.plan7.Background(builder.alphabet)
            own.builder.score_matrix = builder.score_matrix
        return build(query, own.builder, own.background)

    with loggable_argv(), concurrent.futures.ThreadPoolExecutor(min(threads, len(queries)), "gpuhmm-builder") as pool:
        return list(pool.map(one, queries))


def _single_sequence_model(query, builder, background):
    hmm, _, _ = builder.build(query.sequence, background)
    hmm.command_line = SINGLE_SEQUENCE_COMMENT
    return hmm


def _model(query, builder, background):
    """A later round's model: p7_Builder on the previous round's alignment."""
    try:
        # p7_Builder weighs the alignment's sequences in place; the round keeps it as made.
        hmm, _, _ = builder.build_msa(query.rounds[-1].msa.copy(), background)
    except (ValueError, RuntimeError, SystemError) as error:  # Easel's failures, as pyhmmer raises them
        number = len(query.rounds) + 1
        cause = error.__cause__ or error.__context__ or error  # a SystemError wraps Easel's own
        raise GpuhmmError(
            text_of(query.sequence)[0].decode("utf-8", "backslashreplace"),
            f"cannot build the model of round {number} ({cause})",
        ) from None
    hmm.command_line = None  # p7_Builder logs no command; pyhmmer's builder logs this process's
    return hmm


def _finish_round(query, number, hmm, hits, seq_limit):
    """What jackhmmer does with a round's merged hits: sort them, keep the first `seq_limit`
    (AlphaFold 3's patch), mark them against the previous round's included targets, align the
    included domains with the query, and test convergence."""
    if not hits.is_sorted(by="key"):
        hits.sort(by="key")
    if seq_limit is not None and len(hits) > seq_limit:
        hits = first_hits(hits, seq_limit)
    previous = query.rounds[-1] if query.rounds else None
    previous_sequences = len(previous.msa.sequences) if previous else 1
    previous_targets = len(query.ranking)
    new = hits.compare_ranking(query.ranking)
    msa = alignment(hits, query.sequence, number)
    converged = new == 0 and len(msa.sequences) <= previous_sequences
    return Round(number, hmm, hits, msa, new, previous_sequences, previous_targets, converged)


def alignment(hits, sequence, number):
    """p7_tophits_Alignment of the included domains with `sequence` first (its faux trace:
    every residue a match), every consensus column kept, named as jackhmmer names it."""
    msa = hits.to_msa(
        sequence.alphabet,
        sequences=[sequence],
        traces=[pyhmmer.plan7.Trace.from_sequence(sequence)],
        all_consensus_cols=True,
        digitize=True,
    )
    name, accession, description = text_of(sequence)
    msa.name = name + f"-i{number}".encode()
    if accession:
        msa.accession = accession
    if description:
        msa.description = description
    msa.author = AUTHOR.encode()
    return msa


def first_hits(hits, limit):
    """A copy of ranked `hits` with only the first `limit` hits, as AlphaFold 3's patch cuts
    HMMER's list (th->N): the counts of reported and included hits stay those of the whole list."""
    state = hits.__getstate__()
    kept = state["hit"][:limit]
    order = sorted(kept)
    renumber = {old: new for new, old in enumerate(order)}
    state["unsrt"] = [state["unsrt"][old] for old in order]
    state["hit"] = [renumber[old] for old in kept]
    state["N"] = len(kept)
    state["Nalloc"] = len(kept)
    cut = pyhmmer.plan7.TopHits(hits.query)
    cut.__setstate__(state)
    return cut


def _share_time(rounds, started, cpu):
    """Each query's share, by model length, of the round's CPU and wall seconds: the queries
    of a round are searched together."""
    elapsed, now = time.perf_counter() - started, os.times()
    user, system = now.user - cpu.user, now.system - cpu.system
    total = sum(done.hmm.M for done in rounds) or 1
    for done in rounds:
        share = done.hmm.M / total
        done.watch = (user * share, system * share, elapsed * share)


def iteration_results(queries, checkpoints=False):
    """What `pyhmmer.hmmer.jackhmmer` gives of each query: its last round as an
    `IterationResult` (model, hits, alignment, converged, round), or with `checkpoints` the
    list of every round's."""
    results = []
    for query in queries:
        rounds = [
            pyhmmer.plan7.IterationResult(done.hmm, done.hits, done.msa, done.converged, done.number)
            for done in query.rounds
        ]
        results.append(rounds if checkpoints else rounds[-1])
    return iter(results)
