"""The tail queue (worker/tailqueue.py) without a GPU: the tail's kernels built for the host stand
in for the device. Each pair past the filters is finished once, by the batches or by pyhmmer on a
waiting task's thread, and the tables equal hmmsearch's goldens under every threshold setting;
a queue that finishes a pair twice, or loses one, fails the search."""

from __future__ import annotations

import json
import threading
import time
import types

import numpy as np
import pytest

from gpuhmm.worker import tailqueue

from helpers.cli import run_golden
from helpers.tail import HostTailEngine, install_host_tail

ENGINE = ("--backend", "gpu", "--cpu", 3, "--db-shards", 2, "--model-shards", 3, "--domaindef", "gpu")


@pytest.fixture
def queue_engine(monkeypatch):
    """The host build as the GPU, handing back the pairs of targets whose name ends in an even
    digit, and with no latency: the GPU takes pairs of every job, and the threads the rest."""
    engine = HostTailEngine(refused=lambda name: name[-1:].isdigit() and int(name[-1:]) % 2 == 0)
    return install_host_tail(monkeypatch, engine)


@pytest.mark.parametrize("case", ["defaults", "evalue", "bitscore", "cut_ga", "nobias"])
def test_each_side_finishes_pairs_and_the_tables_match(tmp_path, queue_engine, case):
    summary = tmp_path / "summary.json"
    run_golden(tmp_path, "search", "tiny_proteins", case, *ENGINE, "--summary", summary)
    stages = json.loads(summary.read_text())["gpu_stages"]
    assert queue_engine.pairs > 0
    assert stages["pairs_finished_on_gpu"] > 0 and stages["pairs_to_pyhmmer"] > 0, stages


def test_a_model_the_gpu_cannot_hold_shares_a_task_with_filtered_ones(tmp_path, queue_engine, monkeypatch):
    """pfam-tiny's third model (47 nodes), as if too long for the SSV kernel, goes through
    pyhmmer's whole pipeline in the task whose first two models the GPU filters."""
    monkeypatch.setattr(queue_engine, "holds", lambda M: M < 45)
    run_golden(tmp_path, "search", "tiny_proteins", "defaults", *ENGINE[:4], "--model-shards", 1, *ENGINE[-2:])


def test_helpers_finish_pairs_on_the_threads_one_task_leaves_idle(tmp_path, queue_engine, monkeypatch):
    """One model group and one shard: one task, whose thread the helpers join on the host's side."""
    finish, finishers = tailqueue.TailQueue._finish_on_host, set()

    def recorded(self, job, pairs):
        finishers.add(threading.current_thread().name)
        finish(self, job, pairs)

    monkeypatch.setattr(tailqueue.TailQueue, "_finish_on_host", recorded)
    monkeypatch.setattr(queue_engine, "tail", _slowed(queue_engine.tail))  # the helpers' turn
    engine = ("--backend", "gpu", "--cpu", 3, "--db-shards", 1, "--model-shards", 1, "--domaindef", "gpu")
    run_golden(tmp_path, "search", "tiny_proteins", "defaults", *engine)
    assert any(name.startswith("gpuhmm-tail-helper-") for name in finishers), finishers


def _slowed(tail):
    def slowed(*arguments):
        time.sleep(0.05)
        return tail(*arguments)

    return slowed


def test_a_pair_finished_twice_fails_the_search(tmp_path, queue_engine, monkeypatch):
    """Every group the host finishes is finished again; the engine's handed-back pairs make sure
    the host finishes one, however the threads and batches interleave."""
    finish = tailqueue.TailQueue._finish_on_host

    def finishing_twice(self, job, pairs):
        finish(self, job, pairs)
        finish(self, job, pairs)

    monkeypatch.setattr(tailqueue.TailQueue, "_finish_on_host", finishing_twice)
    with pytest.raises(RuntimeError, match="twice"):
        run_golden(tmp_path, "search", "tiny_proteins", "defaults", *ENGINE)


def test_a_pair_lost_fails_the_search(tmp_path, queue_engine, monkeypatch):
    taken = tailqueue.TailQueue._take_for_gpu

    def losing_one(self):
        chosen = taken(self)
        if chosen:
            job, pairs = chosen[-1]
            if len(pairs) > 1:
                chosen[-1] = (job, pairs[:-1])
                job.in_flight -= 1
        return chosen

    monkeypatch.setattr(tailqueue.TailQueue, "_take_for_gpu", losing_one)
    with pytest.raises(RuntimeError, match="dropped"):
        run_golden(tmp_path, "search", "tiny_proteins", "defaults", *ENGINE)


def test_the_gpu_takes_what_it_finishes_before_the_threads_would():
    threads = 16
    queue = tailqueue.TailQueue(None, None, threads, feeders=0)
    gpu, host = queue.rates()
    latency = tailqueue.GPU_LATENCY
    # A small job: the threads finish all of it before one GPU batch would end.
    small = np.full(100, 1e5)
    assert small.sum() / (threads * host) < latency
    assert queue._gpu_share(small) == 0
    # One pair whose serial chain on the GPU outlasts the host's whole backlog.
    assert queue._gpu_share(np.array([1e5] * 1000 + [1e9])) == 1000
    # A backlog: the GPU takes the cheapest, and its batch ends within a pair of the threads' rest.
    costs = np.sort(np.random.default_rng(7).uniform(1e4, 1e6, 20000))
    count = queue._gpu_share(costs)
    assert 0 < count < len(costs)
    taken = costs[:count].sum()
    imbalance = latency + taken / gpu - (costs.sum() - taken) / (threads * host)
    assert abs(imbalance) <= costs[count] / gpu + costs[count] / (threads * host)


def test_a_feeder_takes_the_jobs_that_join_together_in_one_batch(monkeypatch):
    """A second job joins while the feeder waits for the queue to settle: the batch holds both."""
    monkeypatch.setattr(tailqueue, "GATHER_SECONDS", 0.5)
    monkeypatch.setattr(tailqueue, "GATHER_LIMIT", 5.0)
    queue = tailqueue.TailQueue(None, None, 16, feeders=0)

    def join(pairs):
        job = types.SimpleNamespace(
            lo=0, hi=pairs, error=None, key=(), cost=np.full(pairs, 1e6), order=np.arange(pairs), in_flight=0
        )
        with queue._changed:
            queue._jobs.append(job)
            queue._joined = time.perf_counter()
            queue._changed.notify_all()
        return job

    first = join(1000)
    second = []
    threading.Timer(0.05, lambda: second.append(join(1000))).start()
    with queue._changed:
        taken = queue._next_batch()
    assert [job for job, _ in taken] == [first, *second] and len(second) == 1
    assert all(len(pairs) > 0 for _, pairs in taken)
