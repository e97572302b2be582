"""The reduce step: one model's per-shard hits merged, and the hits files of model shards.

`TopHits.merge` sums the shards' automatic Z into the database size (or checks that a `-Z`
agrees), re-thresholds, and recomputes domZ: the result is hmmsearch's own hit list.

A hits file (`--hits`) is data alone, so that merging one from elsewhere runs nothing:

    gpuhmm-hits/3\\n                the format's line
    8 bytes                        the header's length, big-endian
    header                         JSON: what was searched how (options, the database's digest,
                                   Z, the model shard), the run's record, and per model its
                                   TopHits state and the sizes of its parts in the body
    body                           per model: its query (HMMER's binary model), then each hit's
                                   P7_HIT record (`p7_hit_Serialize`)
    32 bytes                       the SHA-256 of all the above, header and body alike

Before merging, `gpuhmm merge` checks that its files were searched alike and, given the
`splitmodels` manifest, that they hold each model shard exactly once.
"""

from __future__ import annotations

import hashlib
import json
import struct

from ..db.models import MANIFEST
from ..errors import GpuhmmError
from ..hits import tophits
from .files import written_together

HITS_FORMAT = "gpuhmm-hits/3"
_MAGIC = f"{HITS_FORMAT}\n".encode()
_LENGTH = struct.Struct(">Q")
_DIGEST = hashlib.sha256().digest_size


def reduce_shards(shard_hits):
    """One model's hits over the whole database, from its per-shard TopHits."""
    first, *rest = shard_hits
    return first.merge(*rest) if rest else first


def save_hits(path, hits, metadata):
    """The intermediate of one model shard: its models' merged TopHits, and `metadata` (plain
    data: what was searched how, the run's record), for `gpuhmm merge`."""
    models, parts = [], []
    for model_hits in hits:
        state, query, records = tophits.as_data(model_hits)
        models.append({"state": state, "query": len(query), "hits": [len(record) for record in records]})
        parts += [query, *records]
    encoded = json.dumps({"format": HITS_FORMAT, **metadata, "models": models}).encode()
    digest = hashlib.sha256()
    with written_together([path]) as (handle,):
        for part in (_MAGIC + _LENGTH.pack(len(encoded)) + encoded, *parts):
            digest.update(part)
            handle.write(part)
        handle.write(digest.digest())


def load_hits(path):
    """The header of a hits file `save_hits` wrote, its TopHits under "hits" and its path under
    "path"; a one-line error for anything else. Nothing read is run: JSON, HMMER's binary
    model reader, and hit records checked before pyhmmer reads them."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise GpuhmmError(path, "hits file not found") from None
    except OSError as error:
        raise GpuhmmError(path, f"cannot read hits file ({error.strerror or error})") from None
    if not data.startswith(_MAGIC):
        raise GpuhmmError(
            path, f"not a {HITS_FORMAT} file (earlier gpuhmm versions' hits files are not read: search again)"
        )
    try:
        return dict(_decoded(data), path=str(path))
    except (ValueError, RecursionError) as error:
        raise GpuhmmError(path, f"damaged or truncated hits file ({error})") from None


_NUMBER = (int, float)
_COUNT = (int, type(None))

#: Header fields, and the JSON types of their values and of the fields inside them.
_HEADER = {
    "search": (dict, {"program": str, "options": list}),
    "database": (dict, {"sha256": str, "sequences": int}),
    "Z": (_NUMBER, {}),
    "model_shard": (dict, {"file": str, "sha256": str, "shard": _COUNT, "shards": _COUNT}),
    "run": (dict, {"models_file": str, "sequences_file": str, "tasks": _NUMBER, "cells": _NUMBER, "filters": dict}),
    "stages": (list, {}),
    "models": (list, {}),
}


def _decoded(data):
    start = len(_MAGIC) + _LENGTH.size
    if len(data) < start + _DIGEST:
        raise ValueError("cut short in its header")
    # Any byte changed, in the header as in the hits, or the file cut short: read nothing more.
    data, digest = memoryview(data)[:-_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(data).digest() != digest:
        raise ValueError("its contents do not match the checksum it was written with")
    (length,) = _LENGTH.unpack_from(data, len(_MAGIC))
    if start + length > len(data):
        raise ValueError("cut short in its header")
    header = json.loads(bytes(data[start : start + length]))
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    for name, (kind, fields) in _HEADER.items():
        value = header.get(name)
        if not isinstance(value, kind) or not all(isinstance(value.get(key, ()), of) for key, of in fields.items()):
            raise ValueError(f"header field {name!r} missing or mistyped")
    _check_run(header["run"], header["stages"])
    body = data[start + length :]
    hits, offset = [], 0
    for model in header["models"]:
        if not (isinstance(model, dict) and isinstance(model.get("hits"), list)):
            raise ValueError("a model's entry does not list its hits")
        sizes = [model.get("query"), *model["hits"]]
        if not all(type(size) is int and size >= 0 for size in sizes) or offset + sum(sizes) > len(body):
            raise ValueError("its models' sizes do not fit its body")
        parts = []
        for size in sizes:
            parts.append(bytes(body[offset : offset + size]))
            offset += size
        hits.append(tophits.from_data(model.get("state"), parts[0], parts[1:]))
        if model["state"]["pipeline"]["Z"] != header["Z"]:
            raise ValueError(f"hits of Z = {model['state']['pipeline']['Z']:g} under a header of Z = {header['Z']:g}")
    if offset != len(body):
        raise ValueError(f"{len(body) - offset} bytes after the last model's hits")
    return dict(header, hits=hits)


def _check_run(run, stages):
    """What `gpuhmm merge`'s summary takes from the run record and adds up is there, as numbers."""
    if not all(isinstance(value, _NUMBER) for value in [run.get("task_seconds"), *run["filters"].values()]):
        raise ValueError("its run record's counts are not numbers")
    if not all(name in run for name in ("backend", "cluster", "sequences", "residues", "Z")):
        raise ValueError("its run record is incomplete")
    for stage in stages:
        if not (isinstance(stage, dict) and isinstance(stage.get("name"), str)):
            raise ValueError("its stages are not named")
        if not isinstance(stage.get("seconds"), _NUMBER):
            raise ValueError("its stages' times are not numbers")


def check_alike(contents):
    """Refuse hits files searched with other options, against another database, or with
    another Z than the first: their tables would mix incomparable E-values."""
    for content in contents[1:]:
        first = contents[0]
        if content["search"] != first["search"]:
            raise GpuhmmError(
                content["path"],
                f"searched as `{_search_line(content)}`, {first['path']} as `{_search_line(first)}`: "
                "merge only hits searched with the same options",
            )
        if content["database"] != first["database"]:
            raise GpuhmmError(
                content["path"],
                f"searched against another database ({_database_line(content)}) than {first['path']} "
                f"({_database_line(first)})",
            )
        if content["Z"] != first["Z"]:
            raise GpuhmmError(content["path"], f"has Z = {content['Z']:g}, {first['path']} Z = {first['Z']:g}")


def _search_line(content):
    return " ".join([content["search"]["program"], *map(str, content["search"]["options"])])


def _database_line(content):
    database = content["database"]
    return f"{database['sequences']} sequences, SHA-256 {database['sha256'][:12]}…"


def in_model_order(contents, shards=None):
    """The models' hits of `contents` in input order: by the `splitmodels` manifest `shards`
    (each of its model shards searched exactly once), else as the files were given (none
    searched on the same model file)."""
    if shards is None:
        _check_no_repeats(contents)
        return [hits for content in contents for hits in content["hits"]]
    manifest = shards.path / MANIFEST
    names = {entry["file"]: index for index, entry in enumerate(shards.shards)}
    count, found, repeated, ranked = len(shards.shards), {}, [], []
    for content in contents:
        place, path = content["model_shard"], content["path"]
        index = names.get(place["file"])
        if index is None:
            raise GpuhmmError(path, f"searched on {place['file']}, which {manifest} does not list")
        entry = shards.shards[index]
        recorded = (place["shard"], place["shards"])
        if place["sha256"] != entry["sha256"] or recorded not in ((None, None), (index, count)):
            raise GpuhmmError(
                path,
                f"searched on another {entry['file']} than the model shard {index + 1} of {count} that {manifest} "
                "lists (another split, or the shard changed since)",
            )
        if len(entry["positions"]) != len(content["hits"]):
            raise GpuhmmError(path, f"holds {len(content['hits'])} models, its shard lists {len(entry['positions'])}")
        if index in found:
            repeated.append((path, index))
            continue
        found[index] = path
        ranked += zip(entry["positions"], content["hits"])
    missing = [entry["file"] for index, entry in enumerate(shards.shards) if index not in found]
    if repeated or missing:
        problems = [f"no hits file holds {', '.join(missing)}: a model shard is missing"] if missing else []
        source = manifest
        if repeated:
            source, index = repeated[0]
            shard = f"model shard {index + 1} of {count} ({shards.shards[index]['file']})"
            problems.insert(0, f"holds {shard}, as {found[index]} does")
        raise GpuhmmError(source, "; ".join([*problems, f"merge each model shard of {manifest} once"]))
    ranked.sort(key=lambda pair: pair[0])
    return [hits for _, hits in ranked]


def _check_no_repeats(contents):
    seen = {}
    for content in contents:
        place = content["model_shard"]
        key = (place["file"], place["sha256"])
        if key in seen:
            raise GpuhmmError(content["path"], f"searched on {key[0]} again: {seen[key]} holds its hits")
        seen[key] = content["path"]
