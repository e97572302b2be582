"""The search options and jackhmmer's: defaults, checks, and what reaches pyhmmer."""

from __future__ import annotations

import pyhmmer
import pytest

from gpuhmm import EngineSettings, GpuhmmError, JackhmmerOptions, SearchOptions
from gpuhmm.messages import PipelineSettings


def test_defaults_are_hmmer_defaults():
    options = SearchOptions()
    assert (options.E, options.domE, options.incE, options.incdomE) == (10.0, 10.0, 0.01, 0.01)
    assert (options.F1, options.F2, options.F3, options.seed) == (0.02, 1e-3, 1e-5, 42)
    assert options.command_line() == []


def test_max_turns_every_filter_off():
    settings = PipelineSettings.of(SearchOptions.from_mapping({"max": True}))
    assert (settings.F1, settings.F2, settings.F3, settings.bias_filter) == (1.0, 1.0, 1.0, False)


def test_cut_and_z_reach_pyhmmer():
    arguments = PipelineSettings.of(SearchOptions.from_mapping({"cut": "tc", "Z": 1000})).arguments()
    assert arguments["bit_cutoffs"] == "trusted" and arguments["Z"] == 1000
    assert PipelineSettings.of(SearchOptions()).Z is None  # automatic: summed over shards by merge
    pyhmmer.plan7.Pipeline(pyhmmer.easel.Alphabet.amino(), **arguments)  # every keyword is pyhmmer's


def test_spelled_out_defaults_count_as_not_given():
    options = SearchOptions.from_mapping({"cut": "ga", "E": 10.0, "max": False, "T": None})
    assert options.command_line() == ["--cut_ga"]


@pytest.mark.parametrize(
    "values, message",
    [
        ({"E": 0}, "-E must be a number > 0"),
        ({"incdomE": -1.0}, "--incdomE must be a number > 0"),
        ({"T": "x"}, "-T must be a number"),
        ({"cut": "xx"}, "cut must be one of"),
        ({"cut": "nc", "domT": 3.0}, "--cut_nc cannot be combined with --domT"),
        ({"max": True, "nobias": True}, "--max cannot be combined with --nobias"),
        ({"incE": 1.0, "incT": 5.0}, "--incE cannot be combined with --incT"),
        ({"seed": -1}, "--seed must be an integer"),
        ({"evalue": 1}, "unknown hmmsearch option"),
    ],
)
def test_bad_values_are_refused(values, message):
    with pytest.raises(GpuhmmError, match=message):
        SearchOptions.from_mapping(values, source="config hmmer")


def test_command_line_round_trip():
    options = SearchOptions.from_mapping({"E": 1e-5, "domZ": 50, "nobias": True, "seed": 7})
    assert options.command_line() == ["-E", "1e-05", "--domZ", "50", "--nobias", "--seed", "7"]


@pytest.mark.parametrize(
    "values, message",
    [
        ({"max_iterations": 0}, "-N: must be an integer >= 1, not 0"),
        ({"max_iterations": 2.5}, "-N: must be an integer >= 1, not 2.5"),
        ({"seq_limit": 0}, "--seq_limit: must be an integer >= 1, not 0"),
        ({"fragthresh": 1.5}, "--fragthresh: must be a number in 0 <= x <= 1, not 1.5"),
        ({"ere": 0.0}, "--ere: must be a number > 0, not 0.0"),
        ({"esigma": float("nan")}, "--esigma: must be a number > 0, not nan"),
        ({"weighting": "x"}, "weighting must be one of pb, gsc, blosum, none, not 'x'"),
        ({"wid": 0.5}, "--wid: sets the identity cutoff of BLOSUM weights; it needs --wblosum"),
        ({"effective": "set"}, "--eset: sets the effective sequence number"),
        ({"chkhmm": 3}, "--chkhmm: must be a file name, not 3"),
    ],
)
def test_bad_jackhmmer_values_are_refused(values, message):
    with pytest.raises(GpuhmmError) as refused:
        JackhmmerOptions(**values)
    assert str(refused.value).startswith(message)


def test_jackhmmer_refuses_model_cutoffs():
    with pytest.raises(GpuhmmError, match="--cut_ga: jackhmmer does not accept model cutoffs"):
        JackhmmerOptions.check_search(SearchOptions(cut="ga"))
    JackhmmerOptions.check_search(SearchOptions())


def test_jackhmmer_splits_the_database_per_thread_unless_told():
    """The CLI and the API take the same default: one shard, or one per worker thread for
    jackhmmer, whose single query would otherwise keep one thread busy."""
    assert EngineSettings(cpus=3).database_shards("jackhmmer") == 3
    assert EngineSettings(cpus=3).database_shards("hmmsearch") == 1
    assert EngineSettings(cpus=3, db_shards=2).database_shards("jackhmmer") == 2
    assert EngineSettings(cpus=0).database_shards("jackhmmer") == 1
