"""Plot a gpuhmm run summary: hits per model and seconds per stage.

Run by Snakemake's `script:` directive (rule plot_summary). Every key of the
summary is optional, so that a summary from an older or newer gpuhmm still
draws what it can.
"""

import contextlib
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display on cluster nodes
import matplotlib.pyplot as plt  # noqa: E402

#: Pfam has ~20,000 models: only the ones with the most hits stay readable.
MAX_MODELS = 30


def model_label(model):
    name = model.get("name") or "?"
    accession = model.get("accession")
    return f"{name} ({accession})" if accession else name


def plot_models(ax, models):
    models = sorted(
        models,
        key=lambda m: (m.get("reported") or 0, m.get("included") or 0),
        reverse=True,
    )
    shown = models[:MAX_MODELS][::-1]  # barh draws bottom-up: biggest on top
    if not shown:
        ax.text(0.5, 0.5, "no models in summary", ha="center", va="center")
        ax.set_axis_off()
        return
    labels = [model_label(m) for m in shown]
    positions = range(len(shown))
    reported = [m.get("reported") or 0 for m in shown]
    included = [m.get("included") or 0 for m in shown]
    # Included hits are a subset of the reported ones: draw them over them.
    ax.barh(positions, reported, color="tab:blue", alpha=0.35, label="reported")
    ax.barh(positions, included, color="tab:blue", label="of which included")
    ax.set_yticks(list(positions), labels, fontsize="small")
    ax.set_xlabel("sequences")
    title = "Hits per model"
    if len(models) > len(shown):
        title += f" (top {len(shown)} of {len(models)})"
    ax.set_title(title)
    ax.legend(loc="lower right")


def plot_stages(ax, stages):
    stages = [s for s in stages if s.get("seconds") is not None][::-1]
    if not stages:
        ax.text(0.5, 0.5, "no stage timings in summary", ha="center", va="center")
        ax.set_axis_off()
        return
    positions = range(len(stages))
    bars = ax.barh(positions, [s["seconds"] for s in stages], color="tab:gray")
    # Short stages have invisible bars: print every value.
    ax.bar_label(bars, labels=[f"{s['seconds']:.3g} s" for s in stages], padding=3)
    ax.margins(x=0.25)
    ax.set_yticks(list(positions), [s.get("name") or "?" for s in stages])
    ax.set_xlabel("seconds")
    ax.set_title("Time per stage")


def main(summary_path, png_path):
    with open(summary_path, encoding="utf-8") as handle:
        summary = json.load(handle)
    models = summary.get("models") or []
    stages = summary.get("stages") or []

    height = max(4.0, 0.25 * min(len(models), MAX_MODELS) + 1.5)
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, height), gridspec_kw={"width_ratios": [3, 2]})
    plot_models(left, models)
    plot_stages(right, stages)

    database = []
    if summary.get("sequences") is not None:
        database.append(f"{summary['sequences']:,} sequences")
    if summary.get("residues") is not None:
        database.append(f"{summary['residues']:,} residues")
    if database:
        fig.suptitle("Database: " + ", ".join(database))
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    print(f"wrote {png_path}: {len(models)} models, {len(stages)} stages", file=sys.stderr)


if __name__ == "__main__" and "snakemake" not in globals():
    # Outside Snakemake: plot_summary.py SUMMARY.json OUT.png
    main(*sys.argv[1:3])
else:
    with open(snakemake.log[0], "w", encoding="utf-8") as log:  # noqa: F821
        with contextlib.redirect_stderr(log):
            main(snakemake.input.summary, snakemake.output.png)  # noqa: F821
