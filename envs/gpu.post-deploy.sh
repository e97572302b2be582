#!/usr/bin/env bash
# Snakemake runs this inside the new environment. GPUHMM_SOURCE is the
# checkout's root, set by rules/common.smk; --no-deps keeps the pins of the env.
set -euo pipefail
python -m pip install --no-deps -e "${GPUHMM_SOURCE:?set by rules/common.smk}"
