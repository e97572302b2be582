# Config validation and the helpers the rules share. Rules live in the other
# rules/*.smk files; functions live only here (snakemake --lint wants them apart).

import os
import shlex

import jsonschema
import yaml
from gpuhmm.errors import GpuhmmError
from gpuhmm.options import SearchOptions
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate


SCHEMA = "../workflow/schemas/config.schema.yaml"



def config_problem(config, schema_path):
    """The config's first problem against the schema as one line naming the key, or None.

    snakemake's validate() reports a problem with the whole schema attached.
    """
    with open(workflow.source_path(schema_path)) as handle:
        schema = yaml.safe_load(handle)
    error = next(iter(jsonschema.Draft202012Validator(schema).iter_errors(config)), None)
    if error is None:
        return None
    where = "config" + "".join(f".{part}" for part in error.absolute_path)
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema["properties"])
        unknown = sorted(set(error.instance) - set(allowed))
        return f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}"
    return f"{where}: {error.message}"


# set_default only fills properties of objects that exist, so the hmmer block
# must exist (an empty `hmmer:` line in YAML reads as null) for its defaults to apply.
config["hmmer"] = config.get("hmmer") or {}
if (problem := config_problem(config, SCHEMA)) is not None:
    raise WorkflowError(problem)
validate(config, SCHEMA)

# The hmmer block is checked by gpuhmm's own option rules (the ones `gpuhmm search`
# applies), so the workflow and the CLI refuse exactly the same combinations.
try:
    HMMER_OPTIONS = SearchOptions.from_mapping(config["hmmer"], source="config hmmer")
except GpuhmmError as error:
    raise WorkflowError(str(error)) from None

OUTDIR = config["outdir"]
# mode: search writes hmmsearch's tables (and the summary and its plot); mode:
# scan writes hmmscan's.
if config["mode"] == "scan":
    ALL_TARGETS = [f"{OUTDIR}/scan.{kind}" for kind in ("tblout", "domtblout", "pfamtblout", "domains.tsv")]
else:
    ALL_TARGETS = [
        f"{OUTDIR}/hits.{kind}" for kind in ("tblout", "domtblout", "pfamtblout")
    ] + [f"{OUTDIR}/{name}" for name in ("domains.tsv", "summary.json", "summary.tsv", "summary.png")]
DB_SHARDS = [f"{OUTDIR}/db/shard-{i:04d}.npz" for i in range(config["db_shards"])]
MODEL_SHARD_IDS = [f"{i:04d}" for i in range(config["model_shards"])]

# Under --sdm conda, "auto" gets the CPU environment: only an explicit "gpu"
# pays for the CUDA stack.
GPUHMM_ENV = "../envs/gpu.yaml" if config["backend"] == "gpu" else "../envs/cpu.yaml"
# The conda envs hold gpuhmm's dependencies; their post-deploy scripts install
# gpuhmm itself from this checkout, found through this variable.
os.environ.setdefault("GPUHMM_SOURCE", workflow.basedir)

wildcard_constraints:
    shard=r"\d{4}",


def hmmer_options():
    """hmmsearch flags for the options that differ from HMMER's defaults."""
    return shlex.join(HMMER_OPTIONS.command_line())


def search_threads(wildcards):
    """Threads of a search job: all cores given to Snakemake unless configured.

    One job owns the node's cores (and GPUs) through its Dask cluster. This is a
    function because workflow.cores is unset (an error) when parsing for a
    cluster executor, whose profile sets the threads instead.
    """
    return config["threads"] or workflow.cores


def search_resources():
    """Where a search runs: its engine flags, and a GPU when one is required.

    These are resources, not params, because they do not change the hits:
    unlike params, resources do not trigger reruns, so finished shards survive
    e.g. a new scheduler address when resuming on a new allocation.
    """
    engine = f"--backend {config['backend']}"
    if config["scheduler"] is not None:
        engine += f" --scheduler {shlex.quote(config['scheduler'])}"
    if config["shard_memory_gb"] is not None:
        engine += f" --shard-memory {config['shard_memory_gb']}"
    # `--cpu` is the job's CPU allocation: its threads here, what a cluster profile's
    # cpus_per_task sets there (the main process of a cluster run caps threads at its own cores).
    resources = {"engine": engine, "cpus_per_task": lambda wildcards, threads: threads}
    if config["backend"] == "gpu":
        resources["gpu"] = 1
    return resources


# Fail at parse time, before any job, with the config key in the message.
for key in ("models", "sequences"):
    if not os.path.exists(config[key]):
        raise WorkflowError(
            f"config '{key}': file not found: {config[key]} "
            f"(relative paths are taken from the working directory {os.getcwd()})"
        )
