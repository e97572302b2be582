"""The F1 stage's parts against their references, without a GPU.

The numpy model of the kernels (`reference`) reads the same warp blocks and striped tables the
GPU reads, so comparing it with pyhmmer's `msv_filter` (HMMER's p7_MSVFilter) checks the block
builder, the striping, the lane shuffles and HMMER's SSV/MSV decisions, for both lane
arithmetics and every kernel shape the test models select.
"""

from __future__ import annotations

import numpy as np
import pyhmmer
import pytest

from gpuhmm.engine import filters, tuning
from gpuhmm.engine.reference import ReferenceEngine
from gpuhmm.stages import msvfilter
from gpuhmm.stages.msvfilter import END_CODE, PAD_CODE
from gpuhmm.stages.msvlayout import Striping, build_warp_blocks, stripe_table

from helpers.data import DATA
from helpers.filters import filter_shard, msv_filter_scores, per_model

AMINO = pyhmmer.easel.Alphabet.amino()


@pytest.fixture(scope="module")
def sequences():
    with pyhmmer.easel.SequenceFile(str(DATA / "proteins.faa"), digital=True, alphabet=AMINO) as handle:
        block = list(handle.read_block())
    short = [s for s in block if len(s) <= 1200]
    # edge cases first (lengths 0 and 1 among them), then a spread of ordinary proteins
    return sorted(short, key=len)[:12] + short[::9][:50]


@pytest.fixture(scope="module")
def hmms():
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        models = sorted(handle, key=lambda hmm: hmm.M)
    picked = [models[0], models[len(models) // 2], models[-1]]
    # a long model, past the multi-sequence kernels: the single-sequence (S = 1) path
    picked.append(pyhmmer.plan7.HMM.sample(AMINO, 2600, pyhmmer.easel.Randomness(3)))
    return picked


@pytest.mark.parametrize("capability", [90, 80], ids=["dpx16", "simd8"])
def test_reference_scores_equal_msv_filter(sequences, hmms, capability):
    """With F1 = 1 every non-empty pair passes, so every MSV score is compared."""
    shard = filter_shard(sequences)
    models = msvfilter.msv_models(hmms)
    engine = ReferenceEngine(capability, warps=4)
    scores, undecided = per_model(filters.f1_filter(engine, models, shard, 1.0), len(models), shard.sequences)
    nonempty = shard.lengths > 0
    shapes = set()
    for m, (hmm, model) in enumerate(zip(hmms, models)):
        expected, expected_undecided = msv_filter_scores(hmm, sequences)
        assert np.array_equal(scores[m][nonempty], expected[nonempty]), hmm.name
        assert np.array_equal(undecided[m][nonempty], expected_undecided[nonempty]), hmm.name
        assert np.isnan(scores[m][~nonempty]).all()
        shapes.add(tuning.choose(model.M, "ssv", capability).striping.S)
    assert 1 in shapes and len(shapes) >= 3  # the test reaches several kernel shapes
    assert undecided.any()  # and the full MSV kernel


def test_pass_counts_equal_hmmer_pipeline(sequences):
    """F1 decisions: per model, the count equals pyhmmer's pipeline "Passed MSV filter"."""
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        hmms = list(handle)[:8]
    shard = filter_shard(sequences)
    pairs = filters.f1_filter(ReferenceEngine(90, warps=4), msvfilter.msv_models(hmms), shard, 0.02)
    block = pyhmmer.easel.DigitalSequenceBlock(AMINO, sequences)
    for m, hmm in enumerate(hmms):
        hits = pyhmmer.plan7.Pipeline(AMINO).search_hmm(hmm, block)
        assert int((pairs.pair_model == m).sum()) == hits.__getstate__()["pipeline"]["n_past_msv"], hmm.name
    assert len(pairs.pair_model) > 0


def test_warp_blocks_hold_every_sequence_once():
    rng = np.random.default_rng(5)
    lengths = np.array([0, 1, 7, 300, 5, 64, 2, 129] + list(rng.integers(1, 400, 60)))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    residues = rng.integers(0, 20, int(offsets[-1])).astype(np.uint8)
    for S in (1, 4, 32):
        blocks = build_warp_blocks(residues, offsets, S, warps=3)
        per_row = 128 // S
        seen = []
        for warp in range(blocks.warps):
            for column in range(S):
                rows = np.arange(blocks.heights[warp])
                at = blocks.block_start[warp] + (rows // per_row) * 128 + column * per_row + rows % per_row
                text = blocks.data[at]
                members = blocks.column_sequences[
                    blocks.column_start[warp * S + column] : blocks.column_start[warp * S + column + 1]
                ]
                ends = np.flatnonzero(text == END_CODE)
                assert len(ends) == len(members)
                start = 0
                for end, index in zip(ends, members):
                    assert np.array_equal(text[start:end], residues[offsets[index] : offsets[index + 1]])
                    start = end + 1
                assert (text[start:] == PAD_CODE).all()
                seen += members.tolist()
        assert sorted(seen) == [i for i in range(len(lengths)) if lengths[i] > 0]
        assert blocks.heights.min() % 4 == 0


@pytest.mark.parametrize("S,W,H", [(8, 2, 10), (8, 2, 7), (8, 4, 5), (2, 2, 16), (32, 2, 10), (1, 4, 6)])
def test_stripe_table_places_each_node(S, W, H):
    """Decoding the table bytes as the kernel does gives back node k at (t, w, h)."""
    from gpuhmm.engine.reference.msvfilter import unstripe_gains

    striping = Striping(S=S, H=H, W=W)
    M = striping.nodes - 3
    nodes = np.arange(1, M + 1) % 100
    fill = np.int16(-1) if W == 2 else np.uint8(255)
    table = stripe_table(np.tile(nodes, (31, 1)).astype(fill.dtype), striping, fill)
    assert table.shape == (31, striping.row_bytes) and striping.row_bytes % (128 if striping.L < 8 else 16) == 0
    gains = unstripe_gains(table, striping)
    for t in range(striping.L):
        for w in range(W):
            for h in range(H):
                k = (w * striping.L + t) * H + h + 1
                assert gains[0, t, w, h] == (k % 100 if k <= M else fill)


@pytest.mark.parametrize("S,expected", [(32, 8), (16, 4), (8, 2), (4, 1), (1, 1)])
def test_table_replicas_skew_banks_within_a_quarter_warp(S, expected):
    """The 8 threads of each quarter-warp load 16 bytes each from 8 distinct bank slots, whichever
    residue rows their groups read (msv.cu: copy r = group mod replicas, skewed by r·L·16)."""
    striping = Striping(S=S, H=9, W=2)
    assert striping.replicas == expected
    L, rows = striping.L, 31
    stride = rows * striping.row_bytes + (L * 16 if expected > 1 else 0)
    assert striping.shared_bytes == (expected - 1) * stride + rows * striping.row_bytes
    rng = np.random.default_rng(S)
    for chunk in range(striping.chunks):
        for quarter in range(4):
            lanes = np.arange(8 * quarter, 8 * quarter + 8)
            group, t = lanes // L, lanes % L
            codes = rng.integers(0, rows, 32 // L)[group]
            address = (group % expected) * stride + codes * striping.row_bytes + (chunk * L + t) * 16
            assert len(set(address // 16 % 8)) == 8


def test_tuning_prefers_most_sequences_per_warp():
    small, medium, large = (tuning.choose(M, "ssv", 90).striping for M in (40, 300, 2400))
    assert small.S == 32 and medium.S == 8 and large.S == 1
    for M in (13, 100, 301, 1021, 2400):
        for stage in ("ssv", "msv"):
            for capability in (80, 90):
                s = tuning.choose(M, stage, capability).striping
                assert s.nodes >= M and s.nodes - M < s.lanes


def test_backend_gpu_without_a_gpu_is_a_clear_error(tmp_path):
    from gpuhmm import engine

    from helpers.cli import run_gpuhmm

    if engine.gpu_problem() is None:
        pytest.skip("a usable GPU is present")
    table = tmp_path / "out.tbl"
    process = run_gpuhmm(
        "search", "--backend", "gpu", "--tblout", table, DATA / "pfam-tiny.hmm", DATA / "heldout.faa", check=False
    )
    assert process.returncode == 1
    assert "error: --backend gpu: " in process.stderr, process.stderr
    assert len(process.stderr.strip().splitlines()) == 1
    assert not table.exists()


def test_a_cluster_of_gpus_leaves_cuda_to_its_workers(monkeypatch):
    """With several local GPU workers, the backend is decided by CuPy being installed, without
    loading it here; a worker that cannot use its GPU says so in a one-line error."""
    from gpuhmm import GpuhmmError, engine, placement
    from gpuhmm.worker import state as worker_state

    def loads_cupy():
        raise AssertionError("this process loaded CuPy")

    monkeypatch.setattr(placement, "gpu_problem", loads_cupy)
    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name: None)
    assert placement.resolve_backend("auto", cluster_gpus=2) == "cpu"
    with pytest.raises(GpuhmmError, match="--backend gpu: CuPy is needed"):
        placement.resolve_backend("gpu", cluster_gpus=2)
    monkeypatch.setattr(engine.importlib.util, "find_spec", lambda name: object())
    assert placement.resolve_backend("gpu", cluster_gpus=2) == "gpu"
    # The same for --backend gpu on a running scheduler's workers (a warm cluster).
    assert placement.resolve_backend("gpu", scheduler="tcp://127.0.0.1:8786") == "gpu"

    monkeypatch.setattr(worker_state, "gpu_problem", lambda: "no CUDA GPU is visible to this process")
    with pytest.raises(GpuhmmError, match=r"--backend gpu on .+:\d+: no CUDA GPU is visible"):
        worker_state.WorkerState().engine()


@pytest.mark.parametrize("F", [0.02, 1e-3, 1e-5, 0.0, -1.0])
def test_pass_threshold_decides_as_the_pvalue(F):
    """Around the threshold, and far from it, bits ≥ threshold exactly when P ≤ F: with F = 0
    an overflow's +inf only passes, with F < 0 nothing."""
    with pyhmmer.plan7.HMMFile(DATA / "pfam-test.h3m.gz") as handle:
        hmms = list(handle)[:6]
    for model in msvfilter.msv_models(hmms):
        threshold = msvfilter.pass_threshold(model.mu, model.lam, F)
        centre = threshold if np.isfinite(threshold) else np.float32(0)
        near = centre.view(np.int32) + np.arange(-3000, 3000, dtype=np.int32)
        bits = np.concatenate([near.view(np.float32), np.float32([-1e30, -50, 0, 50, 1e30, np.inf])])
        pvalues = msvfilter._survival(bits, model.mu, model.lam, np.zeros(len(bits), dtype=bool))
        assert ((bits >= threshold) == (pvalues <= F)).all(), model.name
