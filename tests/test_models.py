"""Model shards: balanced by total length, input order restored by merge."""

from __future__ import annotations

import io
import os
import pickle
import shutil

import pytest

from gpuhmm.db.models import (
    ModelsOnDisk,
    _read_files,
    balance_by_length,
    guided_groups,
    read_models,
    split_models,
)
from gpuhmm.errors import GpuhmmError

from helpers.cli import run_gpuhmm
from helpers.data import DATA, GOLDEN, TABLES, assert_tables_equal

MODELS = DATA / "pfam-test.h3m.gz"


def test_lpt_balance_is_within_one_model():
    lengths = [model.M for model in read_models(MODELS)]
    for shards in (2, 3, 5):
        groups = balance_by_length(lengths, shards)
        assert sorted(position for group in groups for position in group) == list(range(len(lengths)))
        loads = [sum(lengths[position] for position in group) for group in groups]
        assert max(loads) - min(loads) <= max(lengths)
        assert all(group == sorted(group) for group in groups)


def test_split_models_round_trip(tmp_path):
    models = read_models(MODELS)
    shards = split_models(MODELS, tmp_path, 3)
    recovered = {}
    for shard in shards.shards:
        for position, model in zip(shard["positions"], read_models(tmp_path / shard["file"])):
            recovered[position] = model
    assert [recovered[position].name for position in range(len(models))] == [model.name for model in models]
    assert all(recovered[position] == models[position] for position in range(len(models)))


def test_changed_model_shard_is_refused(tmp_path):
    """A shard changed after `splitmodels` is not the one its manifest lists: merge refuses its hits."""
    split_models(MODELS, tmp_path / "models", 2)
    shards = [tmp_path / "models" / f"models-{index:04d}.h3m" for index in range(2)]
    shards[0].write_bytes(shards[1].read_bytes())
    for index, shard in enumerate(shards):
        run_gpuhmm(
            "search", "--cpu", "1", "-o", os.devnull, "--hits", tmp_path / f"{index}.hits", shard, DATA / "proteins.faa"
        )
    process = run_gpuhmm(
        "merge",
        "--order",
        tmp_path / "models" / "manifest.json",
        "--tblout",
        tmp_path / "t",
        *[tmp_path / f"{index}.hits" for index in range(2)],
        check=False,
    )
    assert process.returncode == 1 and "the shard changed since" in process.stderr
    assert not (tmp_path / "t").exists()


def test_cli_pipeline_of_makedb_splitmodels_search_merge(tmp_path):
    """The workflow's path, by hand: shard files, one search per model shard, merge in order."""
    run_gpuhmm("makedb", "--shards", "3", DATA / "proteins.faa", tmp_path / "db")
    run_gpuhmm("splitmodels", "--shards", "3", MODELS, tmp_path / "models")
    hits = []
    for index in (2, 0, 1):  # merge must not depend on the order it is given the files in
        hits.append(tmp_path / f"{index}.hits")
        run_gpuhmm(
            "search", "--cut_ga", "--hits", hits[-1], tmp_path / "models" / f"models-{index:04d}.h3m", tmp_path / "db"
        )
    outputs = {kind: tmp_path / f"merged.{kind}" for kind in TABLES}
    run_gpuhmm(
        "merge",
        "--order",
        tmp_path / "models" / "manifest.json",
        *[word for kind, path in outputs.items() for word in (f"--{kind}", path)],
        *hits,
    )
    for kind, path in outputs.items():
        assert_tables_equal(path, GOLDEN / f"proteins.cut_ga.{kind}")


def test_merge_refuses_missing_shard(tmp_path):
    run_gpuhmm("makedb", DATA / "proteins.faa", tmp_path / "db")
    run_gpuhmm("splitmodels", "--shards", "2", MODELS, tmp_path / "models")
    run_gpuhmm("search", "--hits", tmp_path / "0.hits", tmp_path / "models" / "models-0000.h3m", tmp_path / "db")
    process = run_gpuhmm(
        "merge",
        "--order",
        tmp_path / "models" / "manifest.json",
        "--tblout",
        tmp_path / "t",
        tmp_path / "0.hits",
        check=False,
    )
    assert process.returncode == 1 and "missing" in process.stderr
    assert not (tmp_path / "t").exists()


def _binary(model):
    buffer = io.BytesIO()
    model.write(buffer, binary=True)
    return buffer.getvalue()


def test_models_on_disk_travel_small_and_are_read_again_where_they_land(tmp_path, monkeypatch):
    """A worker in another process reads the model file itself: what it is sent stays small,
    it gets the models the search read (from its own working directory), and a file changed
    since then, or gone, is an error, never other models."""
    path = tmp_path / "models.h3m.gz"
    shutil.copy(MODELS, path)
    monkeypatch.chdir(tmp_path)
    searched = read_models(path.name)
    sent = pickle.dumps(ModelsOnDisk.of(path.name, searched))
    assert len(sent) < 1000
    _read_files.clear()  # as in a worker process, which has read nothing
    monkeypatch.chdir("/")
    received = pickle.loads(sent)
    assert len(received) == len(searched)
    assert [_binary(model) for model in received] == [_binary(model) for model in searched]
    assert received[3] is received.load()[3]  # read once per process
    _read_files.clear()
    status = path.stat()
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    with pytest.raises(GpuhmmError, match="changed while the search ran"):
        received.load()
    path.unlink()
    with pytest.raises(GpuhmmError, match="a worker cannot read the model file"):
        received.load()


def test_guided_groups_cover_every_model_once_and_shrink_from_the_shortest_models():
    lengths = [50, 400, 30, 120, 700, 45, 220, 90, 60, 310, 150, 80]
    groups = guided_groups(lengths, slots=2, finest=4)
    assert sorted(p for group in groups for p in group) == list(range(len(lengths)))
    taken = [p for group in groups for p in sorted(group, key=lambda p: (lengths[p], p))]
    assert taken == sorted(range(len(lengths)), key=lambda p: (lengths[p], p))
    sizes = [sum(lengths[p] for p in group) for group in groups]
    total = sum(lengths)
    assert sizes[0] >= total / 4  # half of the whole over two slots
    assert all(size >= total / 8 for size in sizes[:-1])  # the floor: 1/(finest·slots)
