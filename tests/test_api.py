"""The Python API as a pyhmmer user calls it: settings checked when they are built, as the CLI
and hmmsearch check them, and pyhmmer's own objects taken instead of files."""

from __future__ import annotations

import io
import json
import subprocess

import pyhmmer
import pytest
from pyhmmer.easel import Alphabet, DigitalSequence, DigitalSequenceBlock, SequenceFile
from pyhmmer.plan7 import HMMFile

import gpuhmm
from gpuhmm import EngineSettings, GpuhmmError, OutputFiles, ReportSettings, SearchOptions

from helpers.cli import run_gpuhmm
from helpers.data import DATA, hmmer_binary, table_body

TINY = DATA / "pfam-tiny.hmm"
MODELS = DATA / "pfam-test.h3m.gz"
PROTEINS = DATA / "proteins.faa"
HELDOUT = DATA / "heldout.faa"
QUERIES = DATA / "phmmer-queries.faa"

#: Sharded and threaded, so that the searches of objects go through the merge as files do.
ENGINE = EngineSettings(backend="cpu", cpus=2, db_shards=3)
AMINO = Alphabet.amino()


# Settings built in Python are checked as the CLI checks its words.


def _cases(*cases):
    """pytest parameters of (settings class, keyword arguments, ...), named by the call."""
    return [
        pytest.param(*case, id=f"{case[0].__name__}({', '.join(f'{k}={v!r}' for k, v in case[1].items())})")
        for case in cases
    ]


@pytest.mark.parametrize(
    "settings, values, words, hmmsearch_refuses",
    _cases(
        (SearchOptions, {"Z": 0.0}, ["-Z", "0"], True),
        (SearchOptions, {"E": -1.0}, ["-E", "-1"], True),
        (SearchOptions, {"domZ": 0.0}, ["--domZ", "0"], True),
        (SearchOptions, {"cut": "ga", "E": 1e-3}, ["--cut_ga", "-E", "1e-3"], True),
        (SearchOptions, {"max": True, "F1": 0.1}, ["--max", "--F1", "0.1"], True),
        (SearchOptions, {"seed": -3}, ["--seed", "-3"], True),
        (EngineSettings, {"cpus": -1}, ["--cpu", "-1"], True),
        (EngineSettings, {"db_shards": 0}, ["--db-shards", "0"], False),
        (EngineSettings, {"model_shards": 0}, ["--model-shards", "0"], False),
        (EngineSettings, {"backend": "tpu"}, ["--backend", "tpu"], False),
        (EngineSettings, {"domaindef": "fpga"}, ["--domaindef", "fpga"], False),
        (OutputFiles, {"shuffles": 5, "shuffle_out": "s.tsv"}, ["--shuffle", "5", "--shuffle-out", "s.tsv"], False),
        (OutputFiles, {"shuffles": 100}, ["--shuffle", "100"], False),
    ),
)
def test_settings_are_refused_as_the_cli_refuses_them(tmp_path, settings, values, words, hmmsearch_refuses):
    with pytest.raises(GpuhmmError) as raised:
        settings(**values)
    process = run_gpuhmm("search", *words, TINY, HELDOUT, check=False, cwd=tmp_path)
    assert process.returncode == 1 and process.stderr == f"gpuhmm search: error: {raised.value}\n"
    if hmmsearch_refuses:
        # The reference refuses the same words on its command line.
        process = subprocess.run(
            [hmmer_binary("hmmsearch"), "-o", "/dev/null", *words, TINY, HELDOUT], capture_output=True, text=True
        )
        assert process.returncode == 1 and "Failed to parse command line" in process.stdout + process.stderr


@pytest.mark.parametrize(
    "settings, values, words",
    _cases(
        (SearchOptions, {"cut": "GA"}, "cut must be one of ga, tc, nc, not 'GA'"),
        (SearchOptions, {"T": "x"}, "-T must be a number, not 'x'"),
        (SearchOptions, {"nobias": "yes"}, "--nobias must be True or False"),
        (ReportSettings, {"textw": -5}, "--textw must be 0 (unlimited) or at least 120, not -5"),
        (ReportSettings, {"noali": 1}, "--noali must be True or False"),
        (EngineSettings, {"shard_memory": 0}, "--shard-memory must be more than 0"),
        (EngineSettings, {"scheduler": 8786}, "--scheduler must be an address or a scheduler file"),
        (OutputFiles, {"tblout": 3}, "--tblout must be a file name, not 3"),
    ),
)
def test_bad_values_only_python_can_give_are_one_line_errors(settings, values, words):
    with pytest.raises(GpuhmmError) as raised:
        settings(**values)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_the_config_check_is_the_constructor_check():
    with pytest.raises(GpuhmmError) as built:
        SearchOptions(cut="tc", domT=3.0)
    with pytest.raises(GpuhmmError) as configured:
        SearchOptions.from_mapping({"cut": "tc", "domT": 3.0}, source="config hmmer")
    assert str(configured.value) == f"config hmmer: {built.value}"


def test_cpus_zero_is_one_thread_as_on_the_command_line(tmp_path):
    summary = tmp_path / "summary.json"
    gpuhmm.hmmsearch(TINY, HELDOUT, outputs=OutputFiles(summary=str(summary)), engine=EngineSettings("cpu", cpus=0))
    assert json.loads(summary.read_text())["cluster"].endswith(", 1 thread(s)")


# pyhmmer's objects instead of files.


def _tables(all_hits):
    """The three tables pyhmmer writes from one TopHits per query."""
    all_hits, written = list(all_hits), {}
    for kind in ("targets", "domains", "pfam"):
        handle = io.BytesIO()
        for index, hits in enumerate(all_hits):
            hits.write(handle, format=kind, header=index == 0)
        written[kind] = handle.getvalue().decode()
    assert written["targets"].count("\n") > 20, "too few hits to compare"
    return written


def _block(path):
    with SequenceFile(path, digital=True, alphabet=AMINO) as handle:
        return handle.read_block()


def _hmms(path):
    with HMMFile(path) as handle:
        return list(handle)


def test_hmmsearch_takes_hmms_and_a_sequence_block():
    hmms, block = _hmms(MODELS), _block(PROTEINS)
    files = gpuhmm.hmmsearch(MODELS, PROTEINS, engine=ENGINE)
    expected = _tables(files)
    assert _tables(gpuhmm.hmmsearch(hmms, block, engine=ENGINE)) == expected
    assert _tables(pyhmmer.hmmsearch(hmms, block, cpus=1)) == expected
    # One HMM, as pyhmmer takes it too: the model with the most hits.
    most = max(range(len(files)), key=lambda index: len(files[index]))
    assert _tables(gpuhmm.hmmsearch(hmms[most], block, engine=ENGINE)) == _tables(files[most : most + 1])


def test_hmmsearch_takes_open_files(tmp_path):
    written = {name: tmp_path / name for name in ("files.tbl", "open.tbl")}
    files = gpuhmm.hmmsearch(MODELS, PROTEINS, outputs=OutputFiles(tblout=str(written["files.tbl"])), engine=ENGINE)
    with HMMFile(MODELS) as models, SequenceFile(PROTEINS, digital=True, alphabet=AMINO) as sequences:
        opened = gpuhmm.hmmsearch(
            models, sequences, outputs=OutputFiles(tblout=str(written["open.tbl"])), engine=ENGINE
        )
    assert _tables(opened) == _tables(files)
    # The footer names the files the readers opened, as it names files given by path.
    assert (
        written["open.tbl"].read_text().split("# Current dir:")[0]
        == written["files.tbl"].read_text().split("# Current dir:")[0]
    )


def test_phmmer_takes_digital_queries():
    queries, targets = _block(QUERIES), _block(HELDOUT)
    expected = _tables(gpuhmm.phmmer(QUERIES, HELDOUT, engine=ENGINE))
    assert _tables(gpuhmm.phmmer(queries, targets, engine=ENGINE)) == expected
    assert _tables(gpuhmm.phmmer(list(queries), targets, engine=ENGINE)) == expected
    assert _tables(pyhmmer.phmmer(queries, targets, cpus=1)) == expected


def test_hmmscan_takes_hmms_and_a_sequence_block(tmp_path):
    hmms, block = _hmms(MODELS), _block(HELDOUT)
    tables = tmp_path / "scan.tbl"
    expected = _tables(gpuhmm.hmmscan(MODELS, HELDOUT, engine=ENGINE))
    found = gpuhmm.hmmscan(hmms, block, outputs=OutputFiles(tblout=str(tables)), engine=ENGINE)
    assert _tables(found) == expected
    assert _tables(pyhmmer.hmmscan(block, hmms, cpus=1)) == expected
    assert "# Query file:      (sequences in memory)\n# Target file:     (models in memory)\n" in tables.read_text()
    assert table_body(tables) == expected["targets"]


def _named(name, residues="ACDEFGHIKL", description="", accession=""):
    sequence = DigitalSequence(AMINO, name=name, description=description, sequence=AMINO.encode(residues))
    sequence.accession = accession
    return sequence


@pytest.mark.parametrize(
    "sequences, words",
    [
        (lambda: 42, "not a file or digital sequences"),
        (lambda: _block(HELDOUT).textize(), "not a DigitalSequence"),
        (lambda: SequenceFile(HELDOUT), "digital=True"),
        (lambda: [DigitalSequence(Alphabet.dna(), name="n", sequence=Alphabet.dna().encode("ACGT"))], "mismatch"),
        (lambda: DigitalSequenceBlock(AMINO, [_named("two words")]), "holds whitespace"),
        (lambda: [_named("gapped", "ACD-EF")], "holds gaps"),
        (lambda: [_named("s", accession="P12345")], "has an accession"),
        (lambda: [], "holds no sequences"),
    ],
)
def test_sequences_fasta_cannot_hold_are_refused(tmp_path, sequences, words):
    table = tmp_path / "t.tbl"
    with pytest.raises(GpuhmmError) as raised:
        gpuhmm.hmmsearch(_hmms(TINY), sequences(), outputs=OutputFiles(tblout=str(table)), engine=ENGINE)
    # The error names the file a reader opened, else the objects.
    assert raised.value.source in ("(sequences in memory)", str(HELDOUT)) and words in raised.value.problem
    assert not table.exists()


def test_a_long_target_in_memory_is_refused_by_its_name():
    with pytest.raises(GpuhmmError, match=r"^\(sequences in memory\): sequence 'long' has 100,001 residues"):
        gpuhmm.hmmsearch(_hmms(TINY), [_named("long", "A" * 100_001)], engine=ENGINE)


def test_every_command_states_the_engine_options_alike():
    """One engine group for search, phmmer, scan and jackhmmer: the same help, and no argparse
    default, so that EngineSettings' own default applies from the CLI as from the API."""
    import argparse

    from gpuhmm.cli_arguments import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices

    def engine(command):
        group = next(group for group in commands[command]._action_groups if group.title == "engine")
        return {action.dest: (action.help, action.default) for action in group._group_actions}

    groups = {command: engine(command) for command in ("search", "phmmer", "scan", "jackhmmer")}
    for command, group in groups.items():
        assert all(default is None for _, default in group.values()), command
        for dest in ("cpu", "backend", "scheduler", "shard_memory"):
            assert group[dest] == groups["search"][dest], (command, dest)
    assert groups["jackhmmer"]["domaindef"] == groups["search"]["domaindef"]
    assert "[the worker threads]" in groups["jackhmmer"]["db_shards"][0] and "[1]" in groups["search"]["db_shards"][0]
