"""The reduce step: merge per-shard hits and write HMMER's tables, a domain table and a summary.

`TopHits.merge` sums the shards' automatic Z into the database size (or checks that a `-Z`
agrees), re-thresholds, and recomputes domZ: the result is hmmsearch's own hit list. The
table bodies are pyhmmer's writers, byte-identical to hmmsearch's; only the footer names
gpuhmm.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import time
from pathlib import Path

from ._version import __version__
from ._io import atomic_outputs
from .errors import GpuhmmError

HITS_FORMAT = "gpuhmm-hits/1"

#: `--tblout`, `--domtblout`, `--pfamtblout` → pyhmmer's `TopHits.write` format names.
TABLE_FORMATS = {"tblout": "targets", "domtblout": "domains", "pfamtblout": "pfam"}

#: The shuffle significance table's columns: the first six as tblout's, then the target's
#: Viterbi-filter score, the shuffles and their censored Gumbel fit, and the empirical P-value.
SHUFFLE_COLUMNS = ("target_name", "target_accession", "query_name", "query_accession", "E-value", "score",
                   "viterbi_bits", "shuffles", "gumbel_mu", "gumbel_lambda", "empirical_P")

DOMAIN_COLUMNS = (
    "seq_id", "ali_start", "ali_end", "env_start", "env_end", "hmm_acc", "hmm_name",
    "hmm_start", "hmm_end", "hmm_length", "bit_score", "i_evalue", "c_evalue", "significant",
)


#: hmmsearch's names for its pipeline statistics, summed over models.
FILTER_LABELS = {
    "nseqs": "targets searched (model x sequence)",
    "n_past_msv": "passed MSV filter",
    "n_past_bias": "passed bias filter",
    "n_past_vit": "passed Vit filter",
    "n_past_fwd": "passed Fwd filter",
}


def reduce_shards(shard_hits):
    """One model's hits over the whole database, from its per-shard TopHits."""
    first, *rest = shard_hits
    return first.merge(*rest) if rest else first


def write_outputs(hits, tables, domains=None, footer=(), scan=False, shuffled=None):
    """Write the requested tables (`tables`: {"tblout": path, ...}) for the TopHits of each
    query in input order: models (hmmsearch), or sequences with `scan` (hmmscan). `shuffled`
    is (path, rows) of the shuffle significance table (SHUFFLE_COLUMNS).

    Everything is written to temporaries and renamed together: on any failure no table
    appears. `footer` lines follow each HMMER table, as hmmsearch's own do.
    """
    wanted = {kind: Path(path) for kind, path in tables.items() if path}
    if domains:
        wanted["domains"] = Path(domains)
    if shuffled:
        wanted["shuffled"] = Path(shuffled[0])
    if not wanted:
        return
    with atomic_outputs(*wanted.values()) as temporaries:
        for (kind, _), temporary in zip(wanted.items(), temporaries):
            with open(temporary, "wb") as handle:
                if kind == "domains":
                    _write_domain_table(handle, hits, scan)
                    continue
                if kind == "shuffled":
                    lines = ["\t".join(SHUFFLE_COLUMNS)] + ["\t".join(map(str, row)) for row in shuffled[1]]
                    handle.write(("\n".join(lines) + "\n").encode())
                    continue
                for index, model_hits in enumerate(hits):
                    model_hits.write(handle, format=TABLE_FORMATS[kind], header=index == 0)
                handle.write("".join(f"{line}\n" for line in footer).encode())


def hmmer_footer(command, models_file, targets_file, scan=False):
    """The closing lines of an HMMER table, naming gpuhmm and the command that made it."""
    rows = [
        ("Program:", "gpuhmm"),
        ("Version:", f"{__version__} ({'hmmscan' if scan else 'hmmsearch'} 3.4 rows, through pyhmmer)"),
        ("Pipeline mode:", "SCAN" if scan else "SEARCH"),
        ("Query file:", str(models_file)),
        ("Target file:", str(targets_file)),
        ("Option settings:", command),
        ("Current dir:", os.getcwd()),
        ("Date:", time.strftime("%a %b %e %H:%M:%S %Y")),
    ]
    return ["#", *(f"# {key:<16} {value}" for key, value in rows), "# [ok]"]


def _write_domain_table(handle, hits, scan=False):
    """One row per reported domain, sorted by sequence, then position, then model: the order
    of the models in a search, their names in a scan (whose sequences keep input order)."""
    rows = []
    for query_index, query_hits in enumerate(hits):
        for hit in query_hits.reported:
            sequence, model_length = (query_hits.query.name, hit.length) if scan else (hit.name, query_hits.query.M)
            for domain in hit.domains.reported:
                alignment = domain.alignment
                order = (query_index, alignment.target_from, alignment.hmm_name) if scan else \
                    (sequence, alignment.target_from, query_index)
                rows.append((order, (
                    sequence,
                    alignment.target_from, alignment.target_to, domain.env_from, domain.env_to,
                    _text(alignment.hmm_accession), alignment.hmm_name,
                    alignment.hmm_from, alignment.hmm_to, model_length,
                    f"{domain.score:.1f}", f"{domain.i_evalue:.2g}", f"{domain.c_evalue:.2g}",
                    int(domain.included),
                )))
    rows.sort(key=lambda row: row[0])
    lines = ["\t".join(DOMAIN_COLUMNS)] + ["\t".join(map(str, row[1])) for row in rows]
    handle.write(("\n".join(lines) + "\n").encode())


def model_counts(hits):
    """Per-model counts for the run summary."""
    counts = []
    for model_hits in hits:
        model = model_hits.query
        counts.append({
            "name": model.name,
            "accession": _text(model.accession),
            "M": model.M,
            "reported": len(model_hits.reported),
            "included": len(model_hits.included),
            "domains": sum(len(hit.domains.reported) for hit in model_hits.reported),
            "domains_included": sum(len(hit.domains.included) for hit in model_hits.reported),
        })
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
    outputs = [path for path in (path_json, path_tsv) if path]
    with atomic_outputs(*outputs) as temporaries:
        for path, temporary in zip(outputs, temporaries):
            if path == path_json:
                temporary.write_text(json.dumps(summary, indent=1) + "\n")
            else:
                temporary.write_text("\n".join(lines) + "\n")


def save_hits(path, hits, metadata):
    """The intermediate of one model shard: its models' merged TopHits, for `gpuhmm merge`."""
    with atomic_outputs(path) as (temporary,):
        with open(temporary, "wb") as handle:
            pickle.dump({"format": HITS_FORMAT, "hits": list(hits), **metadata}, handle, protocol=pickle.HIGHEST_PROTOCOL)


def load_hits(path):
    """Read a hits file written by `save_hits` (a trusted, locally produced intermediate)."""
    try:
        with open(path, "rb") as handle:
            content = pickle.load(handle)
    except FileNotFoundError:
        raise GpuhmmError(path, "hits file not found") from None
    except (pickle.UnpicklingError, EOFError, AttributeError, ValueError) as error:
        raise GpuhmmError(path, f"damaged or truncated hits file ({error})") from None
    if not isinstance(content, dict) or content.get("format") != HITS_FORMAT:
        raise GpuhmmError(path, f"not a {HITS_FORMAT} file")
    return content


def _text(value):
    return value or "-"
