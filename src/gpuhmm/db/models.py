"""Profile HMMs: read them with HMMER's own parser, split them into shards balanced by length.

A model-shard directory (`gpuhmm splitmodels`) is:

    manifest.json      the source file, and for each shard its file and the positions of its
                       models in the source file, so merged tables keep the input order
    models-0000.h3m    HMMER3 binary models, in source order
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import heapq
import io
import json
import os
import sys
import threading
from pathlib import Path

import pyhmmer.plan7

from .._atomic import atomic_outputs
from ..errors import GpuhmmError
from ..hits.text import label
from ..options import PhmmerOptions
from .inputs import InputFile

FORMAT = "gpuhmm-models/1"
MANIFEST = "manifest.json"


def read_models(path, allow_empty=False):
    """All models of an HMMER2/3 text or binary file (gzip allowed), in file order.

    `allow_empty` admits an empty file: a model shard of a split into more shards than models.
    """
    path = Path(path)
    if not path.exists():
        raise GpuhmmError(path, "model file not found")
    if path.is_dir():
        raise GpuhmmError(path, "is a directory, not an HMM file")
    if allow_empty and path.is_file() and path.stat().st_size == 0:
        return []
    source = None
    try:
        with contextlib.ExitStack() as stack:
            source = InputFile(path, stack)
            models = list(stack.enter_context(pyhmmer.plan7.HMMFile(source.source)))
    except (EOFError, ValueError, SystemError) as error:
        if source is not None:
            source.check_stream(path)
        if isinstance(error, EOFError) and "HMM file is empty" in str(error):
            raise GpuhmmError(path, "model file is empty") from None
        problem = str(error).removeprefix("Invalid format in file: ").strip()
        if "format not recognized" in problem:
            raise GpuhmmError(path, "not an HMMER model file (format not recognized)") from None
        raise GpuhmmError(path, f"damaged or truncated model file ({problem})") from None
    except OSError as error:
        raise GpuhmmError(path, f"cannot read model file ({error.strerror or error})") from None
    source.check_stream(path)
    if not models:
        raise GpuhmmError(path, "model file holds no models")
    if any(model.alphabet != models[0].alphabet for model in models):
        raise GpuhmmError(path, "models use more than one alphabet")
    return models


@dataclasses.dataclass(frozen=True)
class ModelsOnDisk:
    """A search's models as workers in other processes take them: each process reads the file
    once itself, instead of receiving them pickled (the 2766-model Pfam subset pickles to
    93 MB, which the client would pickle and every worker unpickle, each holding its GIL).
    Like the database, the file must be readable at the same path on every worker's node.
    Indexes like the list of models; `key` names this file's contents as they were read."""

    path: str
    count: int
    key: str  # path, size and modification time

    @classmethod
    def of(cls, path, models):
        """The models just read from `path`, kept as this process's reading of it."""
        on_disk = cls(str(Path(path).resolve()), len(models), _file_key(path))
        with _read_lock:
            _read_files[on_disk.key] = list(models)
        return on_disk

    def load(self):
        with _read_lock:
            if self.key not in _read_files:
                try:
                    unchanged = _file_key(self.path) == self.key
                except OSError as error:
                    raise GpuhmmError(
                        self.path,
                        f"a worker cannot read the model file ({error.strerror or error}); "
                        "workers read it at the same path as the search",
                    ) from None
                if not unchanged:
                    raise GpuhmmError(self.path, "model file changed while the search ran")
                models = read_models(self.path)
                if len(models) != self.count:
                    raise GpuhmmError(self.path, f"holds {len(models)} models, the search read {self.count}")
                _read_files[self.key] = models
                while len(_read_files) > _FILES_KEPT:
                    _read_files.pop(next(iter(_read_files)))
            return _read_files[self.key]

    def __len__(self):
        return self.count

    def __getitem__(self, position):
        return self.load()[position]

    def __iter__(self):
        return iter(self.load())


#: Model files this process has read, by `ModelsOnDisk.key`: the latest few searches'.
_read_files = {}
_read_lock = threading.Lock()
_FILES_KEPT = 2


def _file_key(path):
    status = os.stat(path)
    return f"{Path(path).resolve()}:{status.st_size}:{status.st_mtime_ns}"


#: Held while pyhmmer's builders run with `sys.argv` made loggable (`loggable_argv`).
_argv_lock = threading.Lock()


@contextlib.contextmanager
def loggable_argv():
    """pyhmmer's builders log `" ".join(sys.argv)` in each model as UTF-8, and fail on an
    argument that is not (a file name of other bytes, which Python holds with surrogate
    escapes): while they build in this block, such bytes read as backslash escapes. No output
    shows that log (phmmer's models are not written, jackhmmer's logs are replaced)."""
    with _argv_lock:
        given = sys.argv
        sys.argv = [os.fsencode(word).decode("utf-8", "backslashreplace") for word in given]
        try:
            yield
        finally:
            sys.argv = given


def single_sequence_models(queries, seed=42, phmmer=PhmmerOptions()):
    """phmmer's model of each query sequence, in order: HMMER's single-sequence builder with
    phmmer's score system and calibration (`phmmer`: by default BLOSUM62, gap open 0.02 and
    extend 0.4), calibrated with the run's --seed (phmmer seeds its builder too). One builder
    builds them all in turn, as phmmer's does, so each calibration draws from the same random
    stream as phmmer's."""
    if not queries:
        return []
    alphabet = queries[0].alphabet
    builder = pyhmmer.plan7.Builder(alphabet, seed=seed, **phmmer.builder_arguments())
    background = pyhmmer.plan7.Background(alphabet)
    with loggable_argv():
        return [builder.build(query, background)[0] for query in queries]


def check_cutoffs(models, bit_cutoffs, source):
    """hmmsearch stops when --cut_ga/tc/nc asks for a cutoff a model lacks; so do we, first."""
    lacking = lacking_cutoffs(models, bit_cutoffs)
    if lacking:
        model = label(models[lacking[0]])
        raise GpuhmmError(source, f"model {model!r} has no {bit_cutoffs} cutoffs (needed by the cutoff option)")


def lacking_cutoffs(models, bit_cutoffs):
    """The positions of the models without the cutoffs `bit_cutoffs` names (none without it)."""
    if bit_cutoffs is None:
        return []
    return [
        position for position, model in enumerate(models) if not getattr(model.cutoffs, f"{bit_cutoffs}_available")()
    ]


def longest_first(lengths):
    """Model positions longest first, ties in input order."""
    return sorted(range(len(lengths)), key=lambda position: (-lengths[position], position))


def shortest_first(lengths):
    """Model positions shortest first, ties in input order: the order `guided_groups` groups
    models in, and so the order a search's tasks take them."""
    return sorted(range(len(lengths)), key=lambda position: (lengths[position], position))


def balance_by_length(lengths, shards):
    """Split model positions into `shards` groups of near-equal total length M.

    Longest model first onto the lightest shard (LPT); each group is returned in input
    order. Ties go to the lower shard index, so the split is deterministic.
    """
    heap = [(0, index) for index in range(shards)]
    groups = [[] for _ in range(shards)]
    for position in longest_first(lengths):
        load, index = heapq.heappop(heap)
        groups[index].append(position)
        heapq.heappush(heap, (load + lengths[position], index))
    return [sorted(group) for group in groups]


def guided_groups(lengths, slots, finest=8):
    """Model groups that shrink as the work runs out, for `slots` parallel workers.

    Guided self-scheduling: each group takes 1/(2·slots) of the length left, down to
    1/(finest·slots) of the whole. Early groups are big (few tasks, little overhead); the last
    are small, so no worker idles long at the end. Models are taken shortest first: a group of
    many short models carries the most host work and pyhmmer tails (both grow with the models
    and their hits, not with the cells), which early on other tasks' kernels hide, while the
    last groups, a few long models each, finish soon after their kernels. Longest first, the
    last tasks were many short models each, whose host steps ran while the GPUs idled.
    """
    total = sum(lengths)
    smallest = total / (finest * slots)
    groups, group, size, left = [], [], 0, total
    for position in shortest_first(lengths):
        group.append(position)
        size += lengths[position]
        if size >= max(left / (2 * slots), smallest):
            groups.append(sorted(group))
            left -= size
            group, size = [], 0
    if group:
        groups.append(sorted(group))
    return groups


@dataclasses.dataclass(frozen=True)
class ModelShards:
    """An opened model-shard directory."""

    path: Path
    source: str  # the model file as the user named it
    models: int
    shards: tuple  # ({"file", "positions", "nodes", "sha256"}, ...)

    @classmethod
    def open(cls, path):
        path = Path(path)
        manifest_path = path / MANIFEST if path.is_dir() else path
        try:
            manifest = json.loads(manifest_path.read_text())
            if manifest.get("format") != FORMAT:
                raise ValueError(f"format {manifest.get('format')!r} is not {FORMAT!r}")
            return cls(manifest_path.parent, manifest["source"], manifest["models"], tuple(manifest["shards"]))
        except FileNotFoundError:
            raise GpuhmmError(
                manifest_path, "model-shard manifest not found; build it with `gpuhmm splitmodels`"
            ) from None
        except (ValueError, KeyError, TypeError) as error:
            raise GpuhmmError(manifest_path, f"damaged model-shard manifest ({error})") from None


def shard_place(model_file):
    """Which model file a search read: {"file", "sha256"}, and "shard" and "shards", its place
    (from 0) among the shards of the `splitmodels` manifest beside it, both None where no
    manifest there lists it as it is. `gpuhmm merge` checks that every shard is merged once."""
    path = Path(model_file)
    place = {"file": path.name, "sha256": _sha256(path), "shard": None, "shards": None}
    try:
        split = ModelShards.open(path.parent / MANIFEST)
    except (GpuhmmError, OSError):
        return place
    for index, entry in enumerate(split.shards):
        if isinstance(entry, dict) and (entry.get("file"), entry.get("sha256")) == (path.name, place["sha256"]):
            place.update(shard=index, shards=len(split.shards))
    return place


def memory_place(hmms):
    """`shard_place` for models searched from memory: named so, with the SHA-256 of their binary
    form, and no place among model shards."""
    digest = hashlib.sha256()
    for hmm in hmms:
        handle = io.BytesIO()
        hmm.write(handle, binary=True)
        digest.update(handle.getvalue())
    return {"file": "(models in memory)", "sha256": digest.hexdigest(), "shard": None, "shards": None}


def split_models(model_file, outdir, shards):
    """Write `shards` binary model files balanced by total M, and their manifest."""
    if shards < 1:
        raise GpuhmmError("--shards", f"must be at least 1, not {shards}")
    models = read_models(model_file)
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / MANIFEST).unlink(missing_ok=True)
    entries = []
    for index, positions in enumerate(balance_by_length([model.M for model in models], shards)):
        path = outdir / f"models-{index:04d}.h3m"
        with atomic_outputs(path) as (temporary,):
            with open(temporary, "wb") as handle:
                for position in positions:
                    models[position].write(handle, binary=True)
        entries.append(
            {
                "file": path.name,
                "positions": positions,
                "nodes": sum(models[position].M for position in positions),
                "sha256": _sha256(path),
            }
        )
    manifest = {"format": FORMAT, "source": str(model_file), "models": len(models), "shards": entries}
    with atomic_outputs(outdir / MANIFEST) as (temporary,):
        temporary.write_text(json.dumps(manifest, indent=1))
    return ModelShards.open(outdir)


def _sha256(path):
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def first_model(path):
    """The first model of an HMM file: its alphabet is every model's."""
    path = Path(path)
    with contextlib.ExitStack() as stack:
        try:
            source = InputFile(path, stack)
            return next(iter(stack.enter_context(pyhmmer.plan7.HMMFile(source.source))))
        except FileNotFoundError:
            raise GpuhmmError(path, "model file not found") from None
        except (EOFError, ValueError, StopIteration, OSError):
            return read_models(path)[0]  # reports the problem in full
