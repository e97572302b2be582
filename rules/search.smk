# One job per model shard. Each job searches every database shard on its Dask
# cluster, which keeps the database resident across the models of the shard.


rule search:
    input:
        models=f"{OUTDIR}/models/models-{{shard}}.h3m",
        db=f"{OUTDIR}/db/manifest.json",
        db_shards=DB_SHARDS,
    output:
        hits=f"{OUTDIR}/hits/models-{{shard}}.hits",
    params:
        # Absolute: workers of an external scheduler do not share our cwd.
        db=lambda wildcards, input: os.path.abspath(os.path.dirname(input.db)),
        hmmer=hmmer_options(),
    log:
        f"{OUTDIR}/logs/search/models-{{shard}}.log",
    benchmark:
        f"{OUTDIR}/benchmarks/search/models-{{shard}}.tsv"
    threads: search_threads
    resources:
        **search_resources(),
    conda:
        GPUHMM_ENV
    shell:
        "gpuhmm search {params.hmmer} {resources.engine} --cpu {resources.cpus_per_task}"
        " --hits {output.hits:q} -o /dev/null {input.models:q} {params.db:q}"
        " > {log:q} 2>&1"
