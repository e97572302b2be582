"""jackhmmer 3.4's own options, defaults and checks, and the header lines they print.

jackhmmer searches as hmmsearch does (`SearchOptions`, with stricter inclusion thresholds),
builds its first round's model as phmmer does (`PhmmerOptions`), and adds the rounds, how
later rounds build their models, its checkpoints, and AlphaFold 3's `--seq_limit` patch. This
module imports no pyhmmer, so the CLI checks the options before anything heavy loads.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
from typing import Any, TypeGuard

from .errors import GpuhmmError
from .options import EngineSettings, OutputFiles, PhmmerOptions, SearchOptions, SequenceFormats

#: jackhmmer's inclusion thresholds, stricter than hmmsearch's 0.01; its other defaults are hmmsearch's.
DEFAULT_SEARCH = SearchOptions(incE=0.001, incdomE=0.001)

#: Relative weighting (`--wpb|--wgsc|--wblosum|--wnone`), effective sequence number
#: (`--eent|--eentexp|--eclust|--enone|--eset`) and prior (`--pnone|--plaplace`), as pyhmmer
#: names them ("set": `--eset`, "none" prior: `--pnone`).
WEIGHTINGS = ("pb", "gsc", "blosum", "none")
EFFECTIVE_NUMBERS = ("entropy", "exp", "clust", "none", "set")
PRIORS = ("alphabet", "laplace", "none")


@dataclasses.dataclass(frozen=True)
class JackhmmerOptions:
    """jackhmmer's own options besides the search's (`SearchOptions`) and the first round's
    score system and calibration (`PhmmerOptions`), with jackhmmer 3.4's defaults: the rounds,
    how later rounds build their models, AlphaFold 3's `--seq_limit`, and the checkpoints."""

    max_iterations: int = 5  # -N
    fragthresh: float = 0.5  # a sequence shorter than this share of the alignment is a fragment
    weighting: str = "pb"  # relative weights: Henikoff position-based, G/S/C, BLOSUM filter, none
    wid: float = 0.62  # identity cutoff of the BLOSUM filter
    effective: str = "entropy"  # effective sequence number: entropy, its exponential form, clusters, none, set
    eset: float | None = None  # the number, for effective "set"
    ere: float | None = None  # minimum relative entropy per position (entropy weighting); None: the alphabet's
    esigma: float = 45.0  # sigma of the entropy target
    eid: float = 0.62  # identity cutoff of the clusters
    prior: str = "alphabet"  # the alphabet's mixture Dirichlet prior, Laplace +1, or none
    seq_limit: int | None = None  # AlphaFold 3's patch: keep only the first N hits of each round
    chkhmm: str | None = None  # each round's model, to CHKHMM-<round>.hmm
    chkali: str | None = None  # each round's alignment, to CHKALI-<round>.sto

    def __post_init__(self) -> None:
        _check_integer("-N", self.max_iterations, 1)
        if self.seq_limit is not None:
            _check_integer("--seq_limit", self.seq_limit, 1)
        for flag, value in (("--fragthresh", self.fragthresh), ("--wid", self.wid), ("--eid", self.eid)):
            if not (_is_real(value) and 0 <= value <= 1):
                raise GpuhmmError(flag, f"must be a number in 0 <= x <= 1, not {value!r}")
        for flag, positive in (("--esigma", self.esigma), ("--ere", self.ere)):
            if positive is not None and not (_is_real(positive) and positive > 0):
                raise GpuhmmError(flag, f"must be a number > 0, not {positive!r}")
        # jackhmmer takes any real --eset; one that cannot weigh an alignment fails in round 2, as there.
        if self.eset is not None and not (isinstance(self.eset, numbers.Real) and not isinstance(self.eset, bool)):
            raise GpuhmmError("--eset", f"must be a number, not {self.eset!r}")
        for name, choice, choices in (
            ("weighting", self.weighting, WEIGHTINGS),
            ("effective", self.effective, EFFECTIVE_NUMBERS),
            ("prior", self.prior, PRIORS),
        ):
            if choice not in choices:
                raise GpuhmmError(None, f"{name} must be one of {', '.join(choices)}, not {choice!r}")
        # jackhmmer's getopts: these options have no effect without the one they refine.
        if self.wid != 0.62 and self.weighting != "blosum":
            raise GpuhmmError("--wid", "sets the identity cutoff of BLOSUM weights; it needs --wblosum")
        if self.eid != 0.62 and self.effective != "clust":
            raise GpuhmmError("--eid", "sets the identity cutoff of --eclust; it needs --eclust")
        if (self.effective == "set") != (self.eset is not None):
            raise GpuhmmError("--eset", "sets the effective sequence number: give effective='set' with eset=X")
        for flag, path in (("--chkhmm", self.chkhmm), ("--chkali", self.chkali)):
            if path is not None and not isinstance(path, (str, os.PathLike)):
                raise GpuhmmError(flag, f"must be a file name, not {path!r}")

    def checkpoints(self) -> dict[str, tuple[str, int]]:
        """Each checkpoint file a run may write → (kind, round): "hmm" for `--chkhmm`, "sto"
        for `--chkali`, one file per round up to `max_iterations`."""
        return {
            f"{base}-{number}.{kind}": (kind, number)
            for base, kind in ((self.chkhmm, "hmm"), (self.chkali, "sto"))
            if base is not None
            for number in range(1, self.max_iterations + 1)
        }

    def checked_outputs(self) -> dict[str, str]:
        """The checkpoint files by the option that names them, as `files.check_outputs` takes them."""
        flags = {"hmm": "--chkhmm", "sto": "--chkali"}
        return {f"{flags[kind]} (round {number})": path for path, (kind, number) in self.checkpoints().items()}

    def builder_arguments(self) -> dict[str, Any]:
        """Keyword arguments for `pyhmmer.plan7.Builder` besides the first round's score system:
        jackhmmer's p7_builder_Create, which builds later rounds' models by hand architecture."""
        return dict(
            architecture="hand",
            weighting=self.weighting,
            effective_number=self.eset if self.effective == "set" else self.effective,
            prior_scheme=None if self.prior == "none" else self.prior,
            fragthresh=self.fragthresh,
            wid=self.wid,
            esigma=self.esigma,
            eid=self.eid,
            ere=self.ere,
        )


def check_search_options(options: SearchOptions) -> None:
    """jackhmmer refuses the model cutoffs: its models have none."""
    if options.cut is not None:
        raise GpuhmmError(f"--cut_{options.cut}", "jackhmmer does not accept model cutoffs")


#: How `jackhmmer_header_options` names the settings that differ from jackhmmer's defaults.
_WEIGHTING_FLAGS = {"gsc": "--wgsc", "blosum": "--wblosum", "none": "--wnone"}
_EFFECTIVE_FLAGS = {"clust": "--eclust", "none": "--enone"}
_PRIOR_FLAGS = {"laplace": "--plaplace", "none": "--pnone"}


def jackhmmer_header_options(
    search: SearchOptions,
    settings: JackhmmerOptions,
    first_round: PhmmerOptions,
    outputs: OutputFiles,
    engine: EngineSettings,
    formats: SequenceFormats,
) -> tuple[tuple[str, Any], ...]:
    """The (flag, value) pairs jackhmmer's report header prints a line for (value None for a
    switch): the outputs (the report's own file unless standard output), the `-N`, search,
    model construction and first-round settings that differ from jackhmmer's defaults, the
    formats asserted (`SequenceFormats`), and `--cpu` where given."""
    used: list[tuple[str, Any]] = [("-N", settings.max_iterations)] if settings.max_iterations != 5 else []
    for flag, path in (
        ("-o", outputs.output),
        ("-A", outputs.alignments),
        ("--tblout", outputs.tblout),
        ("--domtblout", outputs.domtblout),
        ("--chkhmm", settings.chkhmm),
        ("--chkali", settings.chkali),
    ):
        if path is not None and path != "-":
            used.append((flag, path))
    report = outputs.report
    used += [(flag, None) for flag, on in (("--acc", report.acc), ("--noali", report.noali)) if on]
    if report.textw != 120:
        used.append(("--notextw", None) if report.textw == 0 else ("--textw", report.textw))
    if settings.seq_limit is not None:
        used.append(("--seq_limit", settings.seq_limit))
    for given, defaults in ((first_round, PhmmerOptions()), (search, DEFAULT_SEARCH)):
        for field in dataclasses.fields(given):
            value = getattr(given, field.name)
            if value != getattr(defaults, field.name):
                flag = f"-{field.name}" if len(field.name) == 1 else f"--{field.name}"
                used.append((flag, None if isinstance(value, bool) else value))
    jackhmmer_defaults = JackhmmerOptions()
    for name in ("fragthresh", "wid", "ere", "esigma", "eid"):
        if getattr(settings, name) != getattr(jackhmmer_defaults, name):
            used.append((f"--{name}", getattr(settings, name)))
    for flags, value in (
        (_WEIGHTING_FLAGS, settings.weighting),
        (_EFFECTIVE_FLAGS, settings.effective),
        (_PRIOR_FLAGS, settings.prior),
    ):
        if value in flags:
            used.append((flags[value], None))
    if settings.eset is not None:
        used.append(("--eset", settings.eset))
    used += [(f"--{name}", getattr(formats, name)) for name in ("qformat", "tformat") if getattr(formats, name)]
    if engine.cpus is not None:
        used.append(("--cpu", engine.cpus))
    return tuple(used)


def _check_integer(flag: str, value: object, minimum: int) -> None:
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= minimum):
        raise GpuhmmError(flag, f"must be an integer >= {minimum}, not {value!r}")


def _is_real(value: object) -> TypeGuard[float]:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value
