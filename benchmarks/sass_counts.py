"""Instructions per DP cell in the SASS of the SSV/MSV kernels (run where nvcc and cuobjdump are).

Compiles chosen specializations of kernels/msv.cu with nvcc for the local GPU's architecture,
disassembles them with `cuobjdump -sass`, and counts the per-cell instructions (DPX/SIMD
arithmetic, byte permutes, shared-memory loads) over the fully unrolled row loop, which holds
4 rows × H words × W cells. Prints one JSON object per specialization.

    python benchmarks/sass_counts.py --arch 90
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import tempfile
from pathlib import Path

KERNELS = Path(__file__).resolve().parent.parent / "src" / "gpuhmm" / "engine" / "kernels"
SIGNATURE = (
    "(const uint8_t*, const long long*, const int*, const int*, const int*, int, const uint8_t*, "
    "const long long*, const gpuhmm::ModelParameters*, const uint8_t*, int, void*)"
)
SPECIALIZATIONS = [  # (S, H, stage, lanes, W)
    (4, 40, 0, "Lanes16", 2),
    (1, 38, 0, "Lanes16", 2),
    (4, 40, 1, "Lanes16", 2),
    (1, 40, 1, "Lanes16", 2),
    (4, 40, 0, "Lanes8", 4),
    (4, 40, 1, "Lanes8", 4),
]
CTA_WARPS = 8


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="90")
    parser.add_argument("--dump", help="also write the full SASS here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "instances.cu"
        lines = [f'#include "{KERNELS / "msv.cu"}"']
        for S, H, stage, lanes, _ in SPECIALIZATIONS:
            lines.append(
                f"template __global__ void gpuhmm::msv_stage<{S},{H},{stage},gpuhmm::{lanes},{CTA_WARPS}>{SIGNATURE};"
            )
        source.write_text("\n".join(lines) + "\n")
        cubin = Path(scratch) / "instances.cubin"
        subprocess.run(["nvcc", "-std=c++17", f"-arch=sm_{args.arch}", "-cubin", "-o", cubin, source], check=True)
        sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
    if args.dump:
        Path(args.dump).write_text(sass)
    functions = re.split(r"\n\s+Function : ", sass)[1:]
    for S, H, stage, lanes, W in SPECIALIZATIONS:
        mangled = f"msv_stageILi{S}ELi{H}ELi{stage}ENS_{len(lanes)}{lanes}ELi{CTA_WARPS}E"
        body = next(f for f in functions if mangled in f.split("\n", 1)[0])
        opcodes = collections.Counter(
            match.group(1).split(".")[0]
            for match in re.finditer(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_.]*)", body)
        )
        cells = 4 * H * W
        total = sum(opcodes.values())
        print(
            json.dumps(
                {
                    "S": S,
                    "H": H,
                    "stage": "msv" if stage else "ssv",
                    "lanes": lanes,
                    "instructions": total,
                    "per_cell_all": round(total / cells, 3),
                    "per_cell": {op: round(n / cells, 3) for op, n in opcodes.most_common(12)},
                }
            )
        )


if __name__ == "__main__":
    main()
