# The reduce step, and the report material drawn from its summary.


rule merge:
    input:
        order=f"{OUTDIR}/models/manifest.json",
        hits=expand(f"{OUTDIR}/hits/models-{{shard}}.hits", shard=MODEL_SHARD_IDS),
    output:
        tblout=f"{OUTDIR}/hits.tblout",
        domtblout=f"{OUTDIR}/hits.domtblout",
        pfamtblout=f"{OUTDIR}/hits.pfamtblout",
        # Not in the report: with real databases it grows to millions of rows,
        # and the report embeds every file it lists.
        domains=f"{OUTDIR}/domains.tsv",
        summary=f"{OUTDIR}/summary.json",
        summary_tsv=report(
            f"{OUTDIR}/summary.tsv",
            caption="../workflow/report/summary_tsv.rst",
            category="Summary",
        ),
    log:
        f"{OUTDIR}/logs/merge.log",
    benchmark:
        f"{OUTDIR}/benchmarks/merge.tsv"
    conda:
        GPUHMM_ENV
    shell:
        "gpuhmm merge --order {input.order:q}"
        " --tblout {output.tblout:q} --domtblout {output.domtblout:q}"
        " --pfamtblout {output.pfamtblout:q} --domains {output.domains:q}"
        " --summary {output.summary:q} --summary-tsv {output.summary_tsv:q}"
        " {input.hits:q} > {log:q} 2>&1"


# Not worth a cluster job and its queue wait. Marked here rather than in a global
# localrules directive, which keeps the name unprefixed in a host that renames our rules.
rule plot_summary:
    localrule: True
    input:
        summary=f"{OUTDIR}/summary.json",
    output:
        png=report(
            f"{OUTDIR}/summary.png",
            caption="../workflow/report/summary_png.rst",
            category="Summary",
        ),
    log:
        f"{OUTDIR}/logs/plot_summary.log",
    conda:
        "../envs/report.yaml"
    script:
        "../workflow/scripts/plot_summary.py"
