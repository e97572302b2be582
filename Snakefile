# gpuhmm: hmmsearch-identical profile searches, sharded over a Dask cluster.
#
#   snakemake --cores 2                             # the embedded test config
#   snakemake --cores all --configfile my.yaml      # your models and sequences
#   snakemake --workflow-profile profiles/slurm     # SLURM with GPUs
#   snakemake --report report.html                  # after a run

from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "rules/common.smk"
include: "rules/prepare.smk"
include: "rules/search.smk"
include: "rules/merge.smk"
include: "rules/scan.smk"


rule all:
    input:
        ALL_TARGETS,
