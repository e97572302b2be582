"""The stages after the Forward filter for one task's models on one shard, through the worker's
tail queue (`tailqueue`): HMMER's `p7_Pipeline` from the Forward parser on, each pair finished
once, by the GPU (kernels/tail/) or by pyhmmer.

The result per model is the TopHits pyhmmer's search of the survivors gives: the GPU's
serialized hits joined with pyhmmer's, and the pairs the GPU finished added to the counts past
Viterbi and Forward.
"""

from __future__ import annotations

import numpy as np

from ..hits import records
from .tailqueue import ON_GPU, TailJob


def finish(queue, shard, models, filter_models, outcomes, pipeline, pipeline_key):
    """Per model: (TopHits of its survivors, pairs the GPU finished, of those the ones past F3);
    and the job's share of the queue's work (seconds and counts by `stage_seconds` name).
    `models` are the HMMs, `filter_models` their worker.models.FilterModel, `outcomes` their
    FilterOutcomes on `shard` (a worker.shards.ResidentShard); `pipeline` is the thread's pyhmmer
    Pipeline, made from `pipeline_key` (alphabet, PipelineSettings)."""
    job = TailJob(shard, models, [f.striped for f in filter_models], outcomes, pipeline_key)
    for m in np.unique(job.model[job.order]).tolist():  # here, not in the feeder that builds a batch
        job.settings(m, pipeline)
    queue.finish(job)
    found, gpu_records = [], job.gpu_records()
    for m, model in enumerate(models):
        pairs = np.flatnonzero(job.model == m)  # in the order the targets were searched
        on_gpu = job.finished[pairs] == ON_GPU
        pieces = list(job.host_hits[m])
        if on_gpu.any() or not pieces:
            buffers = [gpu_records[p] for p in pairs.tolist() if p in gpu_records]
            pieces.insert(0, records.tophits_of_buffers(model, buffers, job.settings(m, pipeline)))
        hits = pieces[0].merge(*pieces[1:]) if len(pieces) > 1 else pieces[0]
        found.append((hits, int(on_gpu.sum()), int(job.passed[pairs][on_gpu].sum())))
    return found, job.stats
