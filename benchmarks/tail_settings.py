"""The stage kernels' launch settings against each other on `tail.py`'s pairs, in one process.

Run on the GPU machine, from the repository root:

    python benchmarks/tail_settings.py --models benchmarks/data/pfam-subset-2766.h3m.xz \
        --proteome benchmarks/data/proteome-HG003687.faa --copies 4 \
        --variant base --variant bounds:envelopes=6 --variant WIDE_ENVELOPE_CELLS=12500

A variant is `base` (the code as it is) or changes joined by '+': `NAME=VALUE` sets
`stages.tail.launch.NAME` (an integer, or integers separated by commas for a tuple), and
`bounds:KERNEL=BLOCKS` gives `tail_KERNEL` in kernels/tail/tail.cu `__launch_bounds__(64,
BLOCKS)` for that variant (a kernel that has bounds already keeps them), and `const:NAME=VALUE`
sets the kernels' `TAIL_CONST int NAME` (tail.cu is replaced by its text with the headers inlined,
edited, and restored at the end). Each variant compiles in an untimed call of `GpuEngine.tail` on
all the pairs, then runs `--repeats` timed calls; the fastest counts. `same_bytes`: the
statuses, hits and records equal the first variant's. A variant that fails ends the run with its
`error`; the record keeps the variants before it.

Writes benchmarks/results/tail-settings-<gpu>.json (or --out).
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import shlex
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))
from tail import batch_builder, workload  # noqa: E402

from gpuhmm.engine import kernelcache  # noqa: E402
from gpuhmm.engine.gpu import GpuEngine  # noqa: E402
from gpuhmm.stages.tail import launch  # noqa: E402

from endtoend import default_threads, gpu_name, gpu_tag  # noqa: E402

SOURCE = kernelcache.KERNELS / "tail" / "tail.cu"


def applied(variant, source):
    """Sets `variant`'s launch constants; returns tail.cu's inlined `source` with its bounds and constants."""
    for change in variant.split("+"):
        if change == "base":
            continue
        name, value = change.split("=")
        if name.startswith("bounds:"):
            kernel = f"__global__ void tail_{name.removeprefix('bounds:')}("
            if kernel not in source:
                raise SystemExit(f"no unbounded kernel tail_{name.removeprefix('bounds:')} in {SOURCE}")
            source = source.replace(kernel, f"__global__ void __launch_bounds__(64, {int(value)}) {kernel[16:]}")
        elif name.startswith("const:"):
            constant = re.compile(rf"(TAIL_CONST int {name.removeprefix('const:')} = )-?\d+;")
            if not constant.search(source):
                raise SystemExit(f"no TAIL_CONST int {name.removeprefix('const:')} in {SOURCE}'s headers")
            source = constant.sub(rf"\g<1>{int(value)};", source)
        else:
            numbers = tuple(int(v) for v in value.split(","))
            setattr(launch, name, numbers if isinstance(getattr(launch, name), tuple) else numbers[0])
    return source


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--proteome", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=4, help="times each pair is run [4]")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per variant [3]")
    parser.add_argument("--variant", action="append", required=True, help="a variant (see above); repeatable")
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    work = workload(args.models, args.proteome, args.copies, args.threads)
    batch = batch_builder(work).build(np.arange(len(work.pairs)))
    engine, original, defaults = GpuEngine(), SOURCE.read_text(), vars(launch).copy()
    source = kernelcache.kernel_source("tail/tail.cu")
    runs, first = [], None
    result = {
        "benchmark": "tail-settings",
        "gpu": gpu_name()[0],
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *sys.argv]),
        "models": len(work.hmms),
        "pairs": len(work.pairs),
        "runs": runs,
    }
    out = args.out or HERE / "results" / f"tail-settings-{gpu_tag()}.json"
    try:
        for variant in args.variant:
            vars(launch).update(defaults)
            SOURCE.write_text(applied(variant, source))
            kernelcache.kernel_source.cache_clear()
            engine._kernels.clear()
            engine.tail(batch)
            best = None
            for _ in range(args.repeats):
                timing, longest = {}, {}
                started = time.perf_counter()
                outputs = engine.tail(batch, timing, longest)
                seconds = time.perf_counter() - started
                if best is None or seconds < best[0]:
                    best = (seconds, timing, longest, outputs["items"])
            found = b"".join(outputs[name].tobytes() for name in ("status", "hits", "records"))
            first = first or found
            seconds, timing, longest, items = best
            runs.append(
                dict(
                    variant=variant,
                    seconds=round(seconds, 3),
                    pairs_per_s=round(len(work.pairs) / seconds, 1),
                    kernel_s={k: round(v, 3) for k, v in timing.items()},
                    longest_item_s={k: round(v, 4) for k, v in longest.items()},
                    items=items,
                    same_bytes=found == first,
                )
            )
            print(json.dumps(runs[-1]), flush=True)
    except Exception as error:  # a fault leaves the device unusable: the variants before it stand
        runs.append(dict(variant=variant, error=f"{type(error).__name__}: {error}"))
        raise
    finally:
        SOURCE.write_text(original)
        out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
