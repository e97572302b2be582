# mode: scan. One job annotates every sequence with every model, as hmmscan: it
# needs all the models at once (each sequence's E-values count them all), so the
# model shards of mode: search do not apply; its Dask cluster still works on
# model groups × database shards.


rule scan:
    input:
        models=config["models"],
        db=f"{OUTDIR}/db/manifest.json",
        db_shards=DB_SHARDS,
    output:
        tblout=f"{OUTDIR}/scan.tblout",
        domtblout=f"{OUTDIR}/scan.domtblout",
        pfamtblout=f"{OUTDIR}/scan.pfamtblout",
        domains=f"{OUTDIR}/scan.domains.tsv",
    params:
        # Absolute: workers of an external scheduler do not share our cwd.
        db=lambda wildcards, input: os.path.abspath(os.path.dirname(input.db)),
        hmmer=hmmer_options(),
    log:
        f"{OUTDIR}/logs/scan.log",
    benchmark:
        f"{OUTDIR}/benchmarks/scan.tsv"
    threads: search_threads
    resources:
        **search_resources(),
    conda:
        GPUHMM_ENV
    shell:
        "gpuhmm scan {params.hmmer} {resources.engine} --cpu {resources.cpus_per_task}"
        " --tblout {output.tblout:q} --domtblout {output.domtblout:q}"
        " --pfamtblout {output.pfamtblout:q} --domains {output.domains:q}"
        " -o /dev/null {input.models:q} {params.db:q} > {log:q} 2>&1"
