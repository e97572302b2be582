"""`gpuhmm merge` and its hits files: a merge of shards searched alike, each model shard once,
gives hmmsearch's tables; anything else, and any file that is not a hits file as gpuhmm
writes them, is refused with one line, writing nothing and running nothing it holds."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import struct

import pytest

from gpuhmm import EngineSettings, OutputFiles, SearchOptions, hmmsearch
from gpuhmm.output import merge

from helpers.cli import run_gpuhmm, run_tables
from helpers.data import DATA, GOLDEN, TABLES, assert_tables_equal

MODELS = DATA / "pfam-test.h3m.gz"
PROTEINS = DATA / "proteins.faa"
HELDOUT = DATA / "heldout.faa"
QUERIES = DATA / "phmmer-queries.faa"


def _split(tmp_path, shards):
    """The test models split into `shards` model shards: their files, in shard order."""
    run_gpuhmm("splitmodels", "--shards", shards, MODELS, tmp_path / "models")
    return [tmp_path / "models" / f"models-{index:04d}.h3m" for index in range(shards)]


def _search(model_file, hits, *options, sequences=PROTEINS):
    run_gpuhmm("search", "--cpu", "1", "-o", os.devnull, "--hits", hits, *options, model_file, sequences)
    return hits


def _refused_merge(tmp_path, *hits):
    """`gpuhmm merge --order` of `hits`: its one error line, once shown that it wrote no table."""
    outputs = {kind: tmp_path / f"merged.{kind}" for kind in TABLES}
    process = run_gpuhmm(
        "merge",
        "--order",
        tmp_path / "models" / "manifest.json",
        *[word for kind, path in outputs.items() for word in (f"--{kind}", path)],
        *hits,
        check=False,
    )
    lines = process.stderr.strip().splitlines()
    assert process.returncode == 1 and len(lines) == 1, process.stderr
    assert lines[0].startswith("gpuhmm merge: error: ")
    assert not any(path.exists() for path in outputs.values())
    return lines[0]


def test_a_shard_given_twice_and_another_missing_is_refused(tmp_path):
    """Two shards of 13 models each: the first twice holds as many models as the split."""
    first, _ = _split(tmp_path, 2)
    hits = _search(first, tmp_path / "0.hits")
    again = tmp_path / "0-again.hits"
    again.write_bytes(hits.read_bytes())
    line = _refused_merge(tmp_path, hits, again)
    assert f"{again}: holds model shard 1 of 2 (models-0000.h3m), as {hits} does" in line
    assert "models-0001.h3m" in line and "missing" in line


def test_shards_searched_with_other_options_are_refused(tmp_path):
    first, second = _split(tmp_path, 2)
    line = _refused_merge(
        tmp_path, _search(first, tmp_path / "0.hits", "--cut_ga"), _search(second, tmp_path / "1.hits")
    )
    assert f"{tmp_path / '1.hits'}: searched as `hmmsearch`, {tmp_path / '0.hits'} as `hmmsearch --cut_ga`" in line


def test_phmmer_shards_built_with_other_matrices_are_refused(tmp_path):
    """phmmer's own options give its models other scores: shards built apart do not merge."""
    hits = []
    for name, matrix in (("0", "BLOSUM62"), ("1", "BLOSUM80")):
        hits.append(tmp_path / f"{name}.hits")
        run_gpuhmm("phmmer", "--cpu", "1", "--mx", matrix, "-o", os.devnull, "--hits", hits[-1], QUERIES, PROTEINS)
    process = run_gpuhmm("merge", "--tblout", tmp_path / "t", *hits, check=False)
    assert process.returncode == 1 and "--mx BLOSUM80" in process.stderr, process.stderr
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("options", [[], ["-Z", "1000"]], ids=["own Z", "same -Z"])
def test_shards_searched_against_another_database_are_refused(tmp_path, options):
    """Other sequences give other hits and, unless `-Z` sets it, another Z: either way the
    merged tables would be those of no single search."""
    first, second = _split(tmp_path, 2)
    hits = [
        _search(first, tmp_path / "0.hits", *options),
        _search(second, tmp_path / "1.hits", *options, sequences=HELDOUT),
    ]
    line = _refused_merge(tmp_path, *hits)
    assert f"{hits[1]}: searched against another database" in line


def test_hits_go_through_their_file_as_data_and_merge_to_hmmsearch_tables(tmp_path, monkeypatch):
    """A search's hits read back from its hits file are the same TopHits, read without pickle,
    and merge to HMMER 3.4's tables (the goldens)."""
    path = tmp_path / "all.hits"
    searched = hmmsearch(MODELS, PROTEINS, SearchOptions(cut="ga"), OutputFiles(hits=str(path)), EngineSettings(cpus=1))

    def refuse(*args, **kwargs):
        raise AssertionError("a hits file was unpickled")

    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    loaded = merge.load_hits(path)["hits"]
    assert [hits.query for hits in loaded] == [hits.query for hits in searched]
    for ours, theirs in zip(loaded, searched):
        ours, theirs = ours.__getstate__(), theirs.__getstate__()
        assert [bytes(hit) for hit in ours.pop("unsrt")] == [bytes(hit) for hit in theirs.pop("unsrt")]
        assert {**ours, "Nalloc": None} == {**theirs, "Nalloc": None}
    status, outputs = run_tables(tmp_path, "merge", path)
    assert status == 0
    for kind in TABLES:
        assert_tables_equal(outputs[kind], GOLDEN / f"proteins.cut_ga.{kind}")


def _header_and_body(path):
    """The JSON header and the body of a hits file, as `merge.save_hits` lays them out: its
    format line and header length, its header, and what follows (the hits, the checksum)."""
    data = path.read_bytes()
    start = data.index(b"\n") + 1 + 8
    (length,) = struct.unpack(">Q", data[start - 8 : start])
    return data[:start], json.loads(data[start : start + length]), bytearray(data[start + length :])


def _relaid(prefix, header, rest):
    """The bytes of a hits file of `header`, followed by `rest` as it is."""
    encoded = json.dumps(header).encode()
    return prefix[:-8] + struct.pack(">Q", len(encoded)) + encoded + bytes(rest)


def _with(prefix, header, body):
    """A hits file of `header` and `body`, its checksum made to match: only the content is wrong."""
    content = _relaid(prefix, header, body)
    return content + hashlib.sha256(content).digest()


class _Payload:
    """Unpickled, it makes a directory: the proof that a file's code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_crafted_or_truncated_hits_files_are_refused_and_run_nothing(tmp_path):
    (model_file,) = _split(tmp_path, 1)
    marker = tmp_path / "the-payload-ran"
    pickled = tmp_path / "pickle.hits"
    pickled.write_bytes(pickle.dumps({"format": "gpuhmm-hits/1", "hits": [_Payload(marker)]}))
    crafted = {pickled: _merged_without_running(tmp_path, pickled, marker)}
    real = _search(model_file, tmp_path / "real.hits")
    data = real.read_bytes()
    prefix, header, body = _header_and_body(real)
    body = body[: -hashlib.sha256().digest_size]
    model = next(model for model in header["models"] if model["hits"])
    first_hit = sum(m["query"] + sum(m["hits"]) for m in header["models"][: header["models"].index(model)])
    first_hit += model["query"]
    overlong = body.copy()  # a P7_HIT whose size field points far past its record
    overlong[first_hit : first_hit + 4] = struct.pack(">I", 0xFFFFFF00)
    unordered = json.loads(json.dumps(header))  # a sorted order that indexes past the hits
    next(m for m in unordered["models"] if m["hits"])["state"]["hit"][0] = 10**6
    for name, content in {
        "truncated": data[: len(data) // 2],
        "header cut short": data[: len(prefix) + 10],
        "header not JSON": prefix[:-8] + struct.pack(">Q", 9) + b"{not json" + bytes(body),
        "header without its fields": _with(prefix, {"format": "gpuhmm-hits/3"}, body),
        "hit record overlong": _with(prefix, header, overlong),
        "order past the hits": _with(prefix, unordered, body),
    }.items():
        path = tmp_path / f"{name.replace(' ', '-')}.hits"
        path.write_bytes(content)
        crafted[path] = _merged_without_running(tmp_path, path, marker)
    for path, line in crafted.items():
        assert line.startswith(f"gpuhmm merge: error: {path}: "), line


def _merged_without_running(tmp_path, path, marker):
    """The error line of a refused merge of `path`, once shown that the file's code did not run."""
    try:
        return _refused_merge(tmp_path, path)
    finally:
        assert not marker.exists(), f"merging {path} ran its code"


def _forge_z(header):
    header["Z"] *= 10
    for model in header["models"]:
        model["state"]["pipeline"]["Z"] *= 10


def _forge_options(header):
    header["search"]["options"].append("--cut_ga")


@pytest.mark.parametrize("forge", [_forge_z, _forge_options], ids=["Z", "options"])
def test_a_header_forged_alike_in_every_shard_is_refused(tmp_path, forge):
    """The checksum covers the header as well as the hits: a header changed the same way in
    every shard (the shards still agree with each other) is refused."""
    hits = [_search(shard, tmp_path / f"{index}.hits") for index, shard in enumerate(_split(tmp_path, 2))]
    for path in hits:
        prefix, header, rest = _header_and_body(path)
        forge(header)
        path.write_bytes(_relaid(prefix, header, rest))
    line = _refused_merge(tmp_path, *hits)
    assert line == f"gpuhmm merge: error: {hits[0]}: damaged or truncated hits file " + (
        "(its contents do not match the checksum it was written with)"
    )


def test_a_hits_file_of_an_earlier_format_is_refused(tmp_path):
    """A gpuhmm-hits/2 file, whose checksum covered its hits only, is refused: search again."""
    (shard,) = _split(tmp_path, 1)
    path = _search(shard, tmp_path / "0.hits")
    prefix, header, rest = _header_and_body(path)
    earlier = b"gpuhmm-hits/2\n" + prefix[prefix.index(b"\n") + 1 :]
    body = rest[: -hashlib.sha256().digest_size]
    header = dict(header, format="gpuhmm-hits/2", body={"bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()})
    path.write_bytes(_relaid(earlier, header, body))
    line = _refused_merge(tmp_path, path)
    assert line == f"gpuhmm merge: error: {path}: not a gpuhmm-hits/3 file " + (
        "(earlier gpuhmm versions' hits files are not read: search again)"
    )
