"""How busy one GPU is during a `gpuhmm search`: the union of its filter kernels' run times.

Run on the GPU machine, from the repository root, with gpuhmm's CLI arguments after `--`
(`--summary` is required):

    python benchmarks/gpu_busy.py --out gpu-busy.json -- search --backend gpu --cpu 16 \\
        --tblout t.txt --summary s.json models.h3m db.faa

The CLI runs in this process with every launch of a gpuhmm kernel (SSV/MSV, the F1 decision,
pair MSV, bias, Viterbi, Forward, the warp-block layout) bracketed by CUDA events on its
stream. Reported: the search stage's seconds (from the summary); the span from the first
kernel's start to the last one's end; the union of all kernels' intervals, that is the time
the GPU ran at least one of them; per kernel, its launches and summed seconds (launches that
overlap each count in full); and the busy share of every 0.5 s. CuPy's own small kernels
(comparisons, nonzero, fills) are not bracketed, so the union is a floor. One GPU only: the
workers of several GPUs run in other processes, which this does not see.

nvidia-smi's utilization (`endtoend.py`) samples whether any kernel ran in each period; this
measures the intervals themselves.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import threading
from pathlib import Path

import cupy

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpuhmm import cli  # noqa: E402
from gpuhmm.engine.gpu import GpuEngine  # noqa: E402

from endtoend import gpu_name  # noqa: E402

BIN_SECONDS = 0.5


class _Bracketed:
    """A compiled kernel whose every launch records a start and an end event on its stream."""

    def __init__(self, function, expression, launches):
        self._function = function
        self._kind = expression.split("<")[0].removeprefix("gpuhmm::")
        self._launches = launches

    def __call__(self, *args, **kwargs):
        self._launches.begin()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        self._function(*args, **kwargs)
        end.record()
        self._launches.record(self._kind, start, end)


class Launches:
    """Every bracketed launch, timed against a reference event recorded before the first."""

    def __init__(self):
        self._lock = threading.Lock()
        self._reference = None
        self._events = []

    def begin(self):
        """Record the reference, on the first launch's stream, before that launch."""
        with self._lock:
            if self._reference is None:
                self._reference = cupy.cuda.Event()
                self._reference.record()

    def record(self, kind, start, end):
        with self._lock:
            self._events.append((kind, start, end))

    def intervals(self):
        """(kind, start s, end s) per launch, relative to the reference."""
        found = []
        for kind, start, end in self._events:
            end.synchronize()
            found.append(
                (
                    kind,
                    cupy.cuda.get_elapsed_time(self._reference, start) / 1e3,
                    cupy.cuda.get_elapsed_time(self._reference, end) / 1e3,
                )
            )
        return found


def merged(intervals):
    """The union of (start, end) intervals, as disjoint sorted intervals."""
    union = []
    for start, end in sorted(intervals):
        if union and start <= union[-1][1]:
            union[-1][1] = max(union[-1][1], end)
        else:
            union.append([start, end])
    return union


def busy_per_bin(union, width):
    """The busy share of each `width` seconds from 0, from disjoint intervals."""
    bins = [0.0] * (int(union[-1][1] / width) + 1 if union else 0)
    for start, end in union:
        moment = start
        while moment < end:
            index = int(moment / width)
            step = min(end, (index + 1) * width)
            bins[index] += step - moment
            moment = step
    return [round(busy / width, 3) for busy in bins]


def report(launches, summary_path):
    intervals = launches.intervals()
    union = merged([(start, end) for _, start, end in intervals])
    kinds = {}
    for kind, start, end in intervals:
        entry = kinds.setdefault(kind, {"launches": 0, "summed_s": 0.0})
        entry["launches"] += 1
        entry["summed_s"] += end - start
    stages = {stage["name"]: stage["seconds"] for stage in json.loads(Path(summary_path).read_text())["stages"]}
    first = min((start for _, start, _ in intervals), default=0.0)
    last = max((end for *_, end in intervals), default=0.0)
    busy = sum(end - start for start, end in union)
    return {
        "search_s": round(stages["search"], 3),
        "kernel_span_s": round(last - first, 3),
        "gpu_busy_s": round(busy, 3),
        "gpu_busy_share_of_search": round(busy / stages["search"], 3) if stages["search"] else None,
        "kernels": {
            kind: {"launches": entry["launches"], "summed_s": round(entry["summed_s"], 3)}
            for kind, entry in sorted(kinds.items())
        },
        f"busy_share_per_{BIN_SECONDS}_s": busy_per_bin(union, BIN_SECONDS),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("gpuhmm", nargs=argparse.REMAINDER, help="-- then gpuhmm's arguments")
    args = parser.parse_args()
    arguments = args.gpuhmm[1:] if args.gpuhmm[:1] == ["--"] else args.gpuhmm
    if "--summary" not in arguments:
        parser.error("gpuhmm's arguments need --summary")
    launches = Launches()
    compiled = GpuEngine._compiled

    def bracketed(engine, source, expression, shared=0):
        return _Bracketed(compiled(engine, source, expression, shared), expression, launches)

    GpuEngine._compiled = bracketed
    status = cli.main(arguments)
    if status:
        sys.exit(status)
    name, driver = gpu_name()
    result = {
        "benchmark": "gpu_busy",
        "gpu": name,
        "gpu_driver": driver,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *sys.argv]),
        **report(launches, arguments[arguments.index("--summary") + 1]),
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({key: value for key, value in result.items() if not key.startswith("busy_share_per")}))


if __name__ == "__main__":
    main()
