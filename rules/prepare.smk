# Shard counts come from the config, so every shard file is known at parse
# time and listed as an output: no checkpoints needed.


rule makedb:
    input:
        seqs=config["sequences"],
        # The alphabet is the models', as hmmsearch takes it.
        models=config["models"],
    output:
        manifest=f"{OUTDIR}/db/manifest.json",
        shards=DB_SHARDS,
    params:
        outdir=lambda wildcards, output: os.path.dirname(output.manifest),
        shards=config["db_shards"],
    log:
        f"{OUTDIR}/logs/makedb.log",
    benchmark:
        f"{OUTDIR}/benchmarks/makedb.tsv"
    conda:
        GPUHMM_ENV
    shell:
        "gpuhmm makedb {input.seqs:q} {params.outdir:q} --shards {params.shards} --models {input.models:q}"
        " > {log:q} 2>&1"


rule split_models:
    input:
        models=config["models"],
    output:
        manifest=f"{OUTDIR}/models/manifest.json",
        shards=expand(f"{OUTDIR}/models/models-{{shard}}.h3m", shard=MODEL_SHARD_IDS),
    params:
        outdir=lambda wildcards, output: os.path.dirname(output.manifest),
        shards=config["model_shards"],
    log:
        f"{OUTDIR}/logs/split_models.log",
    benchmark:
        f"{OUTDIR}/benchmarks/split_models.tsv"
    conda:
        GPUHMM_ENV
    shell:
        "gpuhmm splitmodels {input.models:q} {params.outdir:q} --shards {params.shards}"
        " > {log:q} 2>&1"
