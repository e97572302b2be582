"""The run summary: per-model counts, hmmsearch's pipeline statistics and per-stage times."""

from __future__ import annotations

import datetime
import json
import time

from ..hits.text import label, shown, text_of
from .files import written_together

#: hmmsearch's names for its pipeline statistics, summed over models.
FILTER_LABELS = {
    "nseqs": "targets searched (model x sequence)",
    "n_past_msv": "passed MSV filter",
    "n_past_bias": "passed bias filter",
    "n_past_vit": "passed Vit filter",
    "n_past_fwd": "passed Fwd filter",
}


def model_counts(hits):
    """Per-model counts for the run summary."""
    counts = []
    for model_hits in hits:
        model = model_hits.query
        counts.append(
            {
                "name": label(model),
                "accession": shown(text_of(model)[1] or b"-"),
                "M": model.M,
                "reported": len(model_hits.reported),
                "included": len(model_hits.included),
                "domains": sum(len(hit.domains.reported) for hit in model_hits.reported),
                "domains_included": sum(len(hit.domains.included) for hit in model_hits.reported),
            }
        )
    return counts


def write_summary(path_json, path_tsv, summary):
    """The run summary as JSON (for tools and the report plot) and as a two-column TSV."""
    summary = dict(summary, date=datetime.datetime.now().isoformat(timespec="seconds"))
    models = summary.get("models", [])
    totals = {
        "models": len(models),
        "sequences": summary.get("sequences"),
        "residues": summary.get("residues"),
        "Z": summary.get("Z"),
        "hits reported": sum(model["reported"] for model in models),
        "hits included": sum(model["included"] for model in models),
        "domains reported": sum(model["domains"] for model in models),
        "domains included": sum(model["domains_included"] for model in models),
    }
    summary["totals"] = totals
    filters = summary.get("filters", {})
    lines = ["metric\tvalue"]
    lines += [f"{key}\t{value}" for key, value in totals.items()]
    lines += [f"{FILTER_LABELS[name]}\t{count}" for name, count in filters.items() if name in FILTER_LABELS]
    lines += [f"{stage['name']} seconds\t{stage['seconds']:.3f}" for stage in summary.get("stages", [])]
    texts = {path_json: json.dumps(summary, indent=1) + "\n", path_tsv: "\n".join(lines) + "\n"}
    wanted = [path for path in (path_json, path_tsv) if path]
    with written_together(wanted) as handles:
        for path, handle in zip(wanted, handles):
            handle.write(texts[path].encode())


def merged_runs(runs, contents, merged, command, models_file, started):
    """The summary of `gpuhmm merge`: the model shards' runs (their hits files' records) added up."""
    stages = {}
    for content in contents:
        for stage in content["stages"]:
            stages[stage["name"]] = stages.get(stage["name"], 0.0) + stage["seconds"]
    stage_list = [{"name": name, "seconds": seconds} for name, seconds in stages.items()]
    stage_list.append({"name": "final merge", "seconds": time.perf_counter() - started})
    first = runs[0]
    return {
        "program": "gpuhmm merge",
        "command": command,
        "backend": first["backend"],
        "cluster": first["cluster"],
        "models_file": str(models_file),
        "sequences_file": first["sequences_file"],
        "sequences": first["sequences"],
        "residues": first["residues"],
        "Z": first["Z"],
        "model_shard_files": len(contents),
        "tasks": sum(run["tasks"] for run in runs),
        "cells": sum(run["cells"] for run in runs),
        "task_seconds": sum(run["task_seconds"] for run in runs),
        "filters": {
            name: sum(run["filters"].get(name, 0) for run in runs)
            for name in dict.fromkeys(name for run in runs for name in run["filters"])
        },
        "models": model_counts(merged),
        "stages": stage_list,
    }


def gpu_stage_summary(stage_seconds):
    """Seconds per GPU-backend stage, summed over tasks, and the Viterbi and Forward kernels' TCUPS."""
    counted = ("_cells", "_count")
    summary = {
        f"{name}_s": round(float(value), 4)
        for name, value in stage_seconds.items()
        if not name.endswith(counted) and not name.startswith("pairs_")
    }
    summary.update((name, round(float(value), 2)) for name, value in stage_seconds.items() if name.endswith("_count"))
    summary.update((name, int(value)) for name, value in stage_seconds.items() if name.startswith("pairs_"))
    for stage in ("viterbi", "forward"):
        cells = int(stage_seconds.get(f"{stage}_cells", 0))
        kernel = float(stage_seconds.get(f"{stage}_kernel", 0.0))
        summary[f"{stage}_cells"] = cells
        summary[f"{stage}_tcups"] = round(cells / kernel / 1e12, 3) if kernel else None
    return summary


def search_record(command, backend, cluster, models_file, sequences_file, options, database, model_shards, result):
    """What a search's summary and hits file record of its run (`search.SearchResult`)."""
    record = {
        "program": "gpuhmm search",
        "command": command,
        "backend": backend,
        "cluster": cluster,
        "models_file": str(models_file),
        "sequences_file": str(sequences_file),
        "sequences": database.sequences,
        "residues": database.residues,
        "Z": options.Z or database.sequences,
        "db_shards": len(database.shards),
        "model_shards": model_shards or "guided",
        "tasks": result.tasks,
        "cells": result.cells,
        "task_seconds": result.task_seconds,
        "workers": result.workers,
        "filters": result.filter_counts,
    }
    if result.stage_seconds:
        record["gpu_stages"] = gpu_stage_summary(result.stage_seconds)
    if result.tail_window is not None:
        started, ended = result.tail_window
        record["tail"] = {"started_at": started, "ended_at": ended, "wall_s": round(ended - started, 3)}
    return record
