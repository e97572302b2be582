"""The stages after the Forward filter for one task's models on one shard, on the GPU
(`stages.tail`, kernels/tail/): HMMER's `p7_Pipeline` from the Forward parser on.

Every model's survivors of the GPU filters go to the GPU in one batch. The pairs it cannot vouch
for (a status other than OK: a HMMER range error, a capacity of the kernel, a rounding it cannot
certify), the pairs the Viterbi kernel left unscored, and every pair when the seed is 0 (Easel
then draws an arbitrary one) go to pyhmmer, whose hits join the GPU's. The result per model is
the TopHits pyhmmer's search of the survivors gives, with the GPU-finished pairs added to its
counts past Viterbi and Forward.
"""

from __future__ import annotations

import logging

import numpy as np

from ..hits import records
from ..stages.tail import launch, readback
from ..stages.tail.serialized import NameTable

log = logging.getLogger("gpuhmm")


def finish(engine, shard, models, filter_models, outcomes, pipeline, seed):
    """Per model: (TopHits of its survivors, pairs the GPU finished, of those the ones past F3).
    `models` are the HMMs, `filter_models` their worker.models.FilterModel, `outcomes` their
    FilterOutcomes on `shard` (a worker.shards.ResidentShard); `pipeline` is the thread's pyhmmer
    Pipeline."""
    settings = [records.pipeline_settings(pipeline, model) for model in models]
    on_gpu = [
        np.zeros(len(o.survivors), bool) if seed == 0 else ~np.asarray(o.survivor_unscored, bool) for o in outcomes
    ]
    pair_model = np.concatenate([np.full(mask.sum(), m) for m, mask in enumerate(on_gpu)] + [np.zeros(0, int)])
    positions = np.concatenate([o.survivors[mask] for o, mask in zip(outcomes, on_gpu)] + [np.zeros(0, int)])
    scores = np.concatenate([o.survivor_filter_scores[mask] for o, mask in zip(outcomes, on_gpu)] + [np.zeros(0)])
    finished = {}  # (model, position) → (passed F3, the hit's serialized record or None)
    if len(positions):
        unique, pair_sequence = np.unique(positions, return_inverse=True)
        residues, offsets = shard.tail_sequences(unique)
        block = shard.subset(unique)
        sequences = (residues, offsets, NameTable.of_sequences(block))
        pack = launch.ModelPack([f.striped for f in filter_models])
        for part in launch.calls(len(pair_model)):
            batch = launch.TailBatch.build(
                pack, sequences, pair_model[part], pair_sequence[part], scores[part], settings, seed
            )
            try:
                outputs = engine.tail(batch)
            except MemoryError as error:  # CuPy's OutOfMemoryError: pyhmmer finishes these pairs
                log.warning("GPU out of memory in the domain stages (%s); %d pairs go to pyhmmer", error, len(part))
                continue
            results = readback.read_back(batch, outputs)
            for pair, (status, passed, record) in zip(batch.pairs, results):
                if status == launch.OK:
                    finished[int(pair["model"]), int(unique[pair["sequence"]])] = (passed, record)
    found = []
    for m, (model, outcome) in enumerate(zip(models, outcomes)):
        done = [finished.get((m, int(position))) for position in outcome.survivors]
        hits = records.tophits_of_buffers(
            model, [r[1] for r in done if r is not None and r[1] is not None], settings[m]
        )
        rest = [int(p) for p, r in zip(outcome.survivors, done) if r is None]
        if rest:
            hits = hits.merge(pipeline.search_hmm(model, shard.subset(np.array(rest, dtype=np.int64))))
            pipeline.clear()
        gpu = [r for r in done if r is not None]
        found.append((hits, len(gpu), sum(passed for passed, _ in gpu)))
    return found
