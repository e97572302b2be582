"""The tail queue: one per GPU worker process for the stages after the Forward filter, HMMER's
`p7_Pipeline` from the Forward parser on (`stages.tail`, kernels/tail/).

Every task's survivors of the GPU filters go to it as one `TailJob`. Feeder threads, each on a
stream of its own, pack the cheapest pending pairs of every job, across tasks and models, into
GPU batches; the task threads waiting for their jobs finish meanwhile, with pyhmmer, what the
GPU is worst at: the pairs the GPU hands back, those only pyhmmer can finish, and the most
expensive pending pairs (target length × model length, which the GPU's serial chains follow).
Each pair is taken once, under the queue's lock, by one side. While fewer tasks run than the
worker has threads (a few models), helper threads stand in for the idle ones on the host's side.

A GPU batch takes the cheapest pairs while it would still finish before the worker's threads
would finish them and the rest (`_gpu_share`): its time is the GPU's fixed latency plus its cost
at the GPU's rate, and at least its costliest pair's serial chain; the threads' is the pairs'
cost at their rate, measured as the queue runs. So a small job stays on the host's cores, and
the GPU never holds the pairs it would finish last. A feeder takes its batch once no job has
joined for a moment, so that tasks whose filters end together share one batch: a batch lasts
about as long as its longest chain, whatever its size.
"""

from __future__ import annotations

import logging
import sys
import threading
import time

import numpy as np

from ..hits import records
from ..stages.tail import launch, readback
from ..stages.tail.serialized import NameTable

log = logging.getLogger("gpuhmm")

#: Batches on the GPU at once, each from a feeder thread on its own stream: one batch's long
#: serial stages overlap the other's parsers.
GPU_FEEDERS = 2
#: Pairs per GPU batch at most.
BATCH_PAIRS = launch.PAIRS_PER_CALL
#: Pairs of one job and model a host thread finishes in one pyhmmer search at most: a search
#: configures its profile once, which for a long model costs as much as a pair.
HOST_GROUP = 16
#: The GPU's rate on the pairs, in target residues × model nodes per second (`benchmarks/tail.py`'s
#: bulk: its pairs but the costliest), and one host thread's running pyhmmer's tail before the
#: queue has measured it. The GPU's is not measured per batch: a batch's time is mostly its
#: longest serial chain and its wait for the interpreter lock, and a share cut by it starves the
#: GPU (RESULTS.md).
GPU_COST_RATE, HOST_COST_RATE = 2.3e9, 2.6e7
#: How many seconds of work the host's stated rate counts as, against what the queue measures.
PRIOR_SECONDS = 1.0
#: A GPU batch's shortest time (seconds): building it, its launches and transfers.
GPU_LATENCY = 0.1
#: Seconds per residue × node of one pair's serial chains on the GPU (a lane group, warp or thread
#: runs each of its stages' items): a batch lasts at least this times its costliest pair.
GPU_CHAIN_SECONDS = 1.1e-6

#: A feeder that finds pairs pending takes them once no job has joined for GATHER_SECONDS, and at
#: most GATHER_LIMIT seconds after it found them.
GATHER_SECONDS, GATHER_LIMIT = 0.005, 0.05

#: The interpreter's switch interval (seconds) while a queue runs, at most: a feeder thread waits
#: for the interpreter lock after each wait for its stream, and Python's default 5 ms, paid at
#: each of a batch's steps while the host's threads run, starves the GPU (RESULTS.md).
SWITCH_SECONDS = 5e-5

#: How often (seconds) an idle helper thread looks again whether the worker's tasks left it room.
HELPER_POLL = 0.02

#: Who finished a pair.
PENDING, ON_GPU, ON_HOST = range(3)


class TailJob:
    """One task's survivors: per model of `models` (pyhmmer HMMs, with their `profiles`, the
    striped profiles), its `outcomes`' survivors on `shard` (a worker.shards.ResidentShard).
    `pipeline_key` is what a thread's pyhmmer Pipeline is made from (alphabet, PipelineSettings).
    Survivors the Viterbi kernel left unscored, and every one when the seed is 0 (Easel then
    draws an arbitrary seed), go to pyhmmer alone."""

    def __init__(self, shard, models, profiles, outcomes, pipeline_key):
        self.shard, self.models, self.profiles, self.pipeline_key = shard, models, profiles, pipeline_key
        settings = pipeline_key[1]
        self.seed = settings.seed
        # A GPU batch runs one set of the kernels' pipeline settings.
        self.key = (float(settings.F3), bool(settings.null2), self.seed)
        self._settings = {}  # model → its TopHits pipeline settings, made when first needed
        self.model = np.repeat(np.arange(len(models)), [len(o.survivors) for o in outcomes])
        self.position = np.concatenate([o.survivors for o in outcomes] + [np.zeros(0, np.int64)])
        self.score = np.concatenate([o.survivor_filter_scores for o in outcomes] + [np.zeros(0, np.float32)])
        unscored = np.concatenate([np.asarray(o.survivor_unscored, bool) for o in outcomes] + [np.zeros(0, bool)])
        nodes = np.array([p.M for p in profiles], np.int64)
        self.cost = shard.lengths(self.position).astype(np.int64) * nodes[self.model]
        on_gpu = np.flatnonzero(~unscored) if self.seed != 0 else np.zeros(0, np.int64)
        self.order = on_gpu[np.argsort(self.cost[on_gpu], kind="stable")]  # cheapest first
        self.lo, self.hi = 0, len(self.order)  # the pending part of `order`
        self.handed_back = np.setdiff1d(np.arange(len(self.model)), on_gpu).tolist()
        self.finished = np.full(len(self.model), PENDING, np.int8)
        self.passed = np.zeros(len(self.model), bool)  # past F3, for the pairs the GPU finished
        self.gpu_hits = []  # (pairs, readback.Finished, their indices there): the GPU's reported hits
        self.host_hits = [[] for _ in models]  # per model, pyhmmer's TopHits of the pairs it finished
        self.remaining = len(self.model)
        self.in_flight = 0  # pairs taken and not yet finished or handed back
        self.error = None
        self.stats = {}  # the job's share of the queue's work: `stages_seconds`' names and values

    @property
    def done(self):
        """Every pair finished, or a failure; or no pair left to finish: `check_finished` says
        which pairs went missing."""
        return self.remaining == 0 or self.error is not None or not (self.pending() or self.in_flight)

    def pending(self):
        return self.lo < self.hi or bool(self.handed_back)

    def finished_by(self, pairs, side):
        """Marks `pairs` finished by `side` (ON_GPU, ON_HOST); a pair finished twice is a defect."""
        pairs, counts = np.unique(np.asarray(pairs, np.int64), return_counts=True)
        twice = pairs[(counts > 1) | (self.finished[pairs] != PENDING)]
        if len(twice):
            raise RuntimeError(f"the tail queue finished pair {int(twice[0])} twice")
        self.finished[pairs] = side
        self.remaining -= len(pairs)
        self.in_flight -= len(pairs)

    def gpu_records(self):
        """{pair: its serialized hit (pyhmmer VectorU8)} for the pairs the GPU reported a hit of."""
        return {int(pair): finished.record(p) for pairs, finished, at in self.gpu_hits for pair, p in zip(pairs, at)}

    def settings(self, model, pipeline):
        """Model `model`'s TopHits pipeline settings (`records.pipeline_settings`), made with
        `pipeline` the first time they are needed: a GPU batch or a TopHits of the GPU's hits."""
        if model not in self._settings:
            self._settings[model] = records.pipeline_settings(pipeline, self.models[model])
        return self._settings[model]

    def add(self, name, value):
        self.stats[name] = self.stats.get(name, 0) + value

    def check_finished(self):
        """Raises unless every pair was finished (once: see `finished_by`)."""
        if self.error is not None:
            raise self.error
        if (self.finished == PENDING).any():
            raise RuntimeError(f"the tail queue dropped {int((self.finished == PENDING).sum())} pairs")


class TailQueue:
    """The queue of one GPU worker (see the module's text). `engine` runs GPU batches
    (`GpuEngine.tail`, or the host build in the tests); `pipelines(alphabet, settings)` is the
    calling thread's pyhmmer Pipeline; `threads` are the worker's, each of which may finish pairs
    on the host once its task waits here; `running()`, where given, how many of the worker's
    tasks run now, the rest of its threads idle, for which helper threads finish pairs."""

    def __init__(self, engine, pipelines, threads, feeders=GPU_FEEDERS, running=None):
        self.engine, self._pipelines, self.threads = engine, pipelines, max(1, threads)
        self._running, self._helpers = running, 0
        self._changed = threading.Condition()
        self._jobs = []  # the jobs with pairs pending
        self._host = [HOST_COST_RATE * PRIOR_SECONDS, PRIOR_SECONDS]  # [cost, seconds] of one thread, prior first
        self._joined = 0.0  # when the latest job joined (time.perf_counter)
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_SECONDS))
        for index in range(feeders):
            threading.Thread(target=self._feed, name=f"gpuhmm-tail-feeder-{index}", daemon=True).start()

    def finish(self, job):
        """Queue `job`'s pairs and finish pairs on this thread until all of the job's are."""
        if job.done:
            return
        with self._changed:
            self._jobs.append(job)
            self._joined = time.perf_counter()
            while self._running is not None and self._helpers < self.threads - 1:
                name = f"gpuhmm-tail-helper-{self._helpers}"
                threading.Thread(target=self._help, args=(self._helpers,), name=name, daemon=True).start()
                self._helpers += 1
            self._changed.notify_all()
        while True:
            with self._changed:
                taken = None
                while not job.done and (taken := self._take_for_host()) is None:
                    self._changed.wait()
                if job.done:
                    break
            self._finish_on_host(*taken)
        job.check_finished()

    def rates(self):
        """Pair cost per second of the GPU (stated) and of one host thread (measured)."""
        with self._changed:
            return GPU_COST_RATE, self._host[0] / self._host[1]

    # The host's side.

    def _take_for_host(self):
        """(job, pairs): pairs handed back, else the most expensive pending pair, each with the
        next of the same job and model (up to HOST_GROUP, one pyhmmer search), pending pairs at
        least half as costly; or None."""
        self._jobs = [job for job in self._jobs if job.pending() and job.error is None]
        for job in self._jobs:
            if job.handed_back:
                model = job.model[job.handed_back[-1]]
                pairs = [pair for pair in job.handed_back if job.model[pair] == model][:HOST_GROUP]
                job.handed_back = [pair for pair in job.handed_back if pair not in pairs]
                job.in_flight += len(pairs)
                return job, pairs
        costliest = None
        for job in self._jobs:
            if job.lo < job.hi and (costliest is None or job.cost[job.order[job.hi - 1]] > costliest[1]):
                costliest = job, job.cost[job.order[job.hi - 1]]
        if costliest is None:
            return None
        job, least = costliest[0], costliest[1] / 2  # a group of pairs about as costly
        model, pairs = job.model[job.order[job.hi - 1]], []
        while job.lo < job.hi and len(pairs) < HOST_GROUP:
            pair = job.order[job.hi - 1]
            if job.model[pair] != model or job.cost[pair] < least:
                break
            job.hi -= 1
            pairs.append(int(job.order[job.hi]))
        job.in_flight += len(pairs)
        return job, pairs

    def _help(self, index):
        """Helper thread `index`: finishes pairs on the host while the worker's running tasks
        leave more than `index` of its other threads idle."""
        while True:
            with self._changed:
                taken = None
                while taken is None:
                    if index < self.threads - self._running():
                        taken = self._take_for_host()
                    if taken is None:
                        self._changed.wait(HELPER_POLL)
            self._finish_on_host(*taken)

    def _finish_on_host(self, job, pairs):
        started = time.perf_counter()
        model = int(job.model[pairs[0]])
        try:
            pipeline = self._pipelines(*job.pipeline_key)
            hits = pipeline.search_hmm(job.models[model], job.shard.subset(np.sort(job.position[pairs])))
            pipeline.clear()
        except Exception as error:  # the job's own thread raises it
            with self._changed:
                job.error = error
                self._changed.notify_all()
            return
        seconds = time.perf_counter() - started
        with self._changed:
            try:
                job.finished_by(pairs, ON_HOST)
            except RuntimeError as error:
                job.error = error
            job.host_hits[model].append(hits)
            job.add("tail_host_pairs", seconds)
            self._host[0] += int(job.cost[pairs].sum())
            self._host[1] += seconds
            if job.done:
                self._changed.notify_all()

    # The GPU's side.

    def _feed(self):
        while True:
            taken = None
            try:
                with self._changed:
                    taken = self._next_batch()
                self._finish_on_gpu(taken)
            except Exception as error:  # each job of the batch (or queued) raises it in its own thread
                with self._changed:
                    for job in [job for job, _ in taken] if taken else self._jobs:
                        job.error = error
                    self._changed.notify_all()

    def _next_batch(self):
        """(Under the lock.) Waits for pairs the GPU should take and for the jobs that join with
        them (`GATHER_SECONDS`), then takes them (`_take_for_gpu`)."""
        found = None  # when this feeder found pairs pending
        while True:
            now = time.perf_counter()
            if any(job.lo < job.hi and job.error is None for job in self._jobs):
                found = now if found is None else found
                settle = min(self._joined + GATHER_SECONDS, found + GATHER_LIMIT) - now
                if settle > 0:
                    self._changed.wait(settle)
                    continue
                taken = self._take_for_gpu()
                if taken is not None:
                    return taken
            found = None
            self._changed.wait()

    def _take_for_gpu(self):
        """[(job, its pairs)]: the cheapest pending pairs of the oldest job's settings, as many
        as `_gpu_share` gives the GPU; or None."""
        jobs = [job for job in self._jobs if job.lo < job.hi and job.error is None]
        if not jobs:
            return None
        jobs = [job for job in jobs if job.key == jobs[0].key]
        costs = np.concatenate([job.cost[job.order[job.lo : job.hi]] for job in jobs])
        owner = np.repeat(np.arange(len(jobs)), [job.hi - job.lo for job in jobs])
        rank = np.concatenate([np.arange(job.hi - job.lo) for job in jobs])
        by_cost = np.lexsort((rank, owner, costs))  # within a job, its own order: a prefix of each
        count = self._gpu_share(costs[by_cost])
        if not count:
            return None
        taken = []
        for index, number in enumerate(np.bincount(owner[by_cost[:count]], minlength=len(jobs)).tolist()):
            job = jobs[index]
            if number:
                taken.append((job, job.order[job.lo : job.lo + number]))
                job.lo += number
                job.in_flight += number
        return taken

    def _gpu_share(self, costs):
        """How many of the pending pairs' `costs` (ascending) a GPU batch takes, at most
        BATCH_PAIRS: the cheapest, each while the batch would end no later than the worker's
        threads would end it and the costlier ones (a pair runs on one thread)."""
        gpu, host = GPU_COST_RATE, self._host[0] / self._host[1]
        taken = np.cumsum(costs, dtype=np.float64)
        on_gpu = np.maximum(GPU_LATENCY + taken / gpu, GPU_CHAIN_SECONDS * costs)
        on_host = np.maximum((taken[-1] - taken + costs) / (self.threads * host), costs[-1] / host)
        return min(int(np.count_nonzero(on_gpu <= on_host)), BATCH_PAIRS)  # a prefix: one rises, one falls

    def _finish_on_gpu(self, taken):
        started = time.perf_counter()
        batch = _batch(taken, self._pipelines)
        built = time.perf_counter()
        timing, finished = {}, None
        try:
            outputs = self.engine.tail(batch, timing)
            ran = time.perf_counter()
            finished = readback.read_back(batch, outputs)
            timing["run"], timing["read"] = ran - built, time.perf_counter() - ran
        except MemoryError as error:  # CuPy's OutOfMemoryError: pyhmmer finishes these pairs
            log.warning("GPU out of memory in the domain stages (%s); %d pairs go to pyhmmer", error, len(batch.pairs))
        seconds = time.perf_counter() - started
        with self._changed:
            at = 0
            for job, chosen in taken:
                part = np.arange(at, at + len(chosen))
                at += len(chosen)
                ok = np.zeros(len(chosen), bool) if finished is None else finished.status[part] == launch.OK
                if not ok.all():
                    job.handed_back.extend(chosen[~ok].tolist())
                    job.in_flight -= int((~ok).sum())
                    if job not in self._jobs:
                        self._jobs.append(job)
                job.finished_by(chosen[ok], ON_GPU)
                if finished is not None:
                    job.passed[chosen[ok]] = finished.passed[part[ok]]
                    reported = ok & finished.reported[part]
                    job.gpu_hits.append((chosen[reported], finished, part[reported]))
                for name, value in (  # the job's share of the batch
                    ("batch_count", 1),
                    ("batch", seconds),
                    ("batch_build", built - started),
                    *timing.items(),
                ):
                    job.add(f"tail_gpu_{name}", len(chosen) / len(batch.pairs) * value)
            self._changed.notify_all()


def _batch(taken, pipelines):
    """The `launch.TailBatch` of [(job, pairs)]: the jobs' models and sequences, each once;
    `pipelines(alphabet, settings)` is this thread's pyhmmer Pipeline."""
    profiles, settings, pair_model, pair_sequence, scores = [], [], [], [], []
    residues, offsets, names, used, sequences = [], [np.zeros(1, np.int64)], [], 0, 0
    for job, pairs in taken:
        models, model_index = np.unique(job.model[pairs], return_inverse=True)
        pair_model.append(model_index + len(profiles))
        profiles += [job.profiles[m] for m in models.tolist()]
        settings += [job.settings(m, pipelines(*job.pipeline_key)) for m in models.tolist()]
        positions, sequence_index = np.unique(job.position[pairs], return_inverse=True)
        pair_sequence.append(sequence_index + sequences)
        sequences += len(positions)
        sequence_residues, sequence_offsets = job.shard.tail_sequences(positions)
        residues.append(sequence_residues)
        offsets.append(sequence_offsets[1:] + used)
        used += int(sequence_offsets[-1])
        names.append(job.shard.tail_names(positions))
        scores.append(job.score[pairs])
    return launch.TailBatch.build(
        launch.ModelPack(profiles),
        (np.concatenate(residues), np.concatenate(offsets), NameTable.joined(names)),
        np.concatenate(pair_model),
        np.concatenate(pair_sequence),
        np.concatenate(scores),
        settings,
        taken[0][0].seed,
    )
