"""hmmsearch's reporting, inclusion and filter options, with HMMER 3.4's defaults and checks,
and the options phmmer and jackhmmer add to them.

The names are hmmsearch's own (without dashes), so the CLI, the workflow config and the
Python API all speak HMMER's vocabulary.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import sys
from collections.abc import Collection, Mapping
from typing import Any, NoReturn, TypeGuard

from ._host import available_cpus
from .errors import GpuhmmError

#: `--cut_ga|tc|nc` → pyhmmer's `bit_cutoffs` names.
CUTOFFS = {"ga": "gathering", "tc": "trusted", "nc": "noise"}

#: hmmsearch refuses any of these together with a `--cut_*` option.
THRESHOLD_OPTIONS = ("E", "T", "domE", "domT", "incE", "incT", "incdomE", "incdomT")

#: The E-value thresholds, which may be infinite.
E_VALUE_OPTIONS = ("E", "domE", "incE", "incdomE")

#: hmmsearch refuses the filter thresholds together with `--max`.
FILTER_OPTIONS = ("F1", "F2", "F3")

#: HMMER's binaries run with flush-to-zero: a filter's P-value below the smallest normal double
#: is 0, which a threshold of 0 passes. pyhmmer keeps such P-values subnormal: this threshold,
#: the largest subnormal, passes them and no other, as HMMER's 0 does.
FLUSHED_THRESHOLD = math.nextafter(sys.float_info.min, 0.0)

#: The options HMMER 3.4's searches refuse together (their esl_getopts incompatibilities):
#: each option, and those it excludes.
EXCLUSIVE_OPTIONS = (
    ("cut", THRESHOLD_OPTIONS),
    ("max", (*FILTER_OPTIONS, "nobias")),
    ("E", ("T",)),
    ("domE", ("domT",)),
    ("incE", ("incT",)),
    ("incdomE", ("incdomT",)),
)

#: Shuffles per reported hit for the shuffle significance table (`--shuffle`), and the fewest.
DEFAULT_SHUFFLES = 1000
MIN_SHUFFLES = 10

#: `--backend`: where the filters run; `--domaindef`: where the GPU backend runs domain definition.
BACKENDS = ("auto", "cpu", "gpu")
#: `--backend auto` runs a job on the CPU, GPU or not, below this many cells (Σ M × residues)
#: per worker thread: the GPU's start (CUDA, CuPy, kernels) costs more than it saves. The CPU
#: path's rate grows with its threads and the GPU's start does not, so the cut-off grows with
#: them too. `benchmarks/auto_cutoff.py` measures the crossover.
AUTO_GPU_MIN_CELLS_PER_THREAD = 8.2e10
DOMAINDEFS = ("cpu", "gpu")


@dataclasses.dataclass(frozen=True)
class SearchOptions:
    """The options of one search, as `hmmsearch` takes them."""

    E: float = 10.0
    T: float | None = None
    domE: float = 10.0
    domT: float | None = None
    incE: float = 0.01
    incT: float | None = None
    incdomE: float = 0.01
    incdomT: float | None = None
    cut: str | None = None
    Z: float | None = None
    domZ: float | None = None
    F1: float = 0.02
    F2: float = 1e-3
    F3: float = 1e-5
    max: bool = False
    nobias: bool = False
    nonull2: bool = False
    seed: int = 42

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], source: str | None = "options") -> SearchOptions:
        """Build checked options from a mapping (a workflow config block, parsed CLI flags); a
        problem names `source`.

        A key whose value is None or HMMER's default counts as not given, so a config that
        spells every default out is the same as an empty one.
        """
        defaults = {field.name: field.default for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(defaults))
        if unknown:
            raise GpuhmmError(
                source, f"unknown hmmsearch option(s): {', '.join(unknown)}; known: {', '.join(defaults)}"
            )
        given = {key: value for key, value in values.items() if value is not None and value != defaults[key]}
        try:
            return cls(**given)
        except GpuhmmError as error:
            raise GpuhmmError(source, error.problem) from None

    def __post_init__(self) -> None:
        # The one check of these options: the CLI and the workflow's config come through here too.
        # A value equal to HMMER's default counts as not given, as in `from_mapping`.
        given = [field.name for field in dataclasses.fields(self) if getattr(self, field.name) != field.default]
        for name in ("E", "domE", "incE", "incdomE", "Z", "domZ"):
            value = getattr(self, name)
            # hmmsearch takes `-E inf` (report everything); the other values must be finite.
            allowed = _is_number(value) or (name in E_VALUE_OPTIONS and value == math.inf)
            if value is not None and not (allowed and value > 0):
                _fail(f"{_flag(name)} must be a number > 0, not {value!r}")
        for name in ("T", "domT", "incT", "incdomT"):
            value = getattr(self, name)
            if value is not None and not _is_number(value):
                _fail(f"{_flag(name)} must be a number, not {value!r}")
        # HMMER gives the filters' thresholds no range: `--F1 0` passes MSV overflows only, `inf` is 1.
        for name in FILTER_OPTIONS:
            value = getattr(self, name)
            if not (_is_number(value) or value in (math.inf, -math.inf)):
                _fail(f"{_flag(name)} must be a number, not {value!r}")
        for name in ("max", "nobias", "nonull2"):
            _check_flag(_flag(name), getattr(self, name))
        if self.cut is not None and self.cut not in CUTOFFS:
            _fail(f"cut must be one of {', '.join(CUTOFFS)}, not {self.cut!r}")
        check_exclusive(given, self.cut)
        _check_integer("--seed", self.seed, 0)

    @property
    def bit_cutoffs(self) -> str | None:
        """pyhmmer's name of the model cutoffs in use, or None."""
        return CUTOFFS[self.cut] if self.cut else None

    def command_line(self) -> list[str]:
        """The options that differ from HMMER's defaults, spelled as hmmsearch takes them."""
        words = []
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value == field.default:
                continue
            if field.name == "cut":
                words.append(f"--cut_{value}")
            elif isinstance(value, bool):
                words.append(_flag(field.name))
            else:
                words += [_flag(field.name), f"{value:g}" if isinstance(value, float) else str(value)]
        return words


def filter_threshold(value: float) -> float:
    """The pipeline's F1, F2 or F3 for the option's `value`: at most 1, as p7_pli_Create sets it,
    and `FLUSHED_THRESHOLD` from 0 up to the smallest normal double."""
    return FLUSHED_THRESHOLD if 0.0 <= value < sys.float_info.min else min(1.0, value)


def check_exclusive(given: Collection[str], cut: str | None = None) -> None:
    """Refuse options that HMMER refuses together (`EXCLUSIVE_OPTIONS`); `given` names those set,
    `cut` is the `--cut_*` kind. The options' own check counts a value at HMMER's default as not
    given; the command line counts every option given, at any value, as esl_getopts does."""
    for name, excluded in EXCLUSIVE_OPTIONS:
        clashing = [other for other in excluded if other in given]
        if name in given and clashing:
            flag = f"--cut_{cut}" if name == "cut" else _flag(name)
            _fail(f"{flag} cannot be combined with {', '.join(map(_flag, clashing))}")


def _flag(name: str) -> str:
    return f"-{name}" if len(name) == 1 else f"--{name}"


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_real(value: object) -> TypeGuard[float]:
    """A number that is not NaN (infinities included), as jackhmmer's real options take."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value


def _fail(problem: str) -> NoReturn:
    raise GpuhmmError(None, problem)


def _is_integer(value: object) -> TypeGuard[int]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_integer(flag: str, value: object, minimum: int, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not (_is_integer(value) and value >= minimum):
        _fail(f"{flag} must be an integer >= {minimum}, not {value!r}")


def _check_flag(flag: str, value: object) -> None:
    if not isinstance(value, bool):
        _fail(f"{flag} must be True or False, not {value!r}")


def _check_choice(flag: str, value: object, choices: Collection[str]) -> None:
    if value not in choices:
        _fail(f"{flag} must be one of {', '.join(choices)}, not {value!r}")


def _check_path(flag: str, value: object) -> None:
    if value is not None and not isinstance(value, (str, os.PathLike)):
        _fail(f"{flag} must be a file name, not {value!r}")


@dataclasses.dataclass(frozen=True)
class ReportSettings:
    """How the `-o` report looks, as hmmsearch's `--noali`, `--acc` and `--notextw`/`--textw`."""

    noali: bool = False  # no alignments in the report
    acc: bool = False  # accessions, where the models and sequences have them, instead of names
    textw: int = 120  # line width for alignments; 0: unlimited (`--notextw`)

    def __post_init__(self) -> None:
        _check_flag("--noali", self.noali)
        _check_flag("--acc", self.acc)
        # hmmsearch's --textw takes 120 or more; 0 is --notextw.
        if self.textw != 0 and not (_is_integer(self.textw) and self.textw >= 120):
            _fail(f"--textw must be 0 (unlimited) or at least 120, not {self.textw!r}")


@dataclasses.dataclass(frozen=True)
class OutputFiles:
    """Where a search writes what; None: not written. `-` is standard output."""

    tblout: str | None = None
    domtblout: str | None = None
    pfamtblout: str | None = None
    domains: str | None = None  # one row per reported domain (TSV, pfam_scan style)
    summary: str | None = None  # the run summary, JSON
    summary_tsv: str | None = None
    hits: str | None = None  # the intermediate of a model shard, for `gpuhmm merge`
    output: str | None = None  # `-o`: the report, with alignments unless `report.noali`
    alignments: str | None = None  # `-A`: a Stockholm alignment of each query's included hits
    shuffle_out: str | None = None  # shuffle significance per reported hit (TSV)
    shuffles: int = DEFAULT_SHUFFLES  # shuffles per hit for `shuffle_out`
    report: ReportSettings = ReportSettings()

    def __post_init__(self) -> None:
        for flag, path in self.named().items():
            _check_path(flag, path)
        _check_integer("--shuffle", self.shuffles, MIN_SHUFFLES)
        if self.shuffles != DEFAULT_SHUFFLES and self.shuffle_out is None:
            raise GpuhmmError("--shuffle", "needs --shuffle-out FILE for its table")
        if not isinstance(self.report, ReportSettings):
            _fail(f"report must be a ReportSettings, not {self.report!r}")

    def named(self) -> dict[str, str | None]:
        """Each output's option name → its path (None where not given)."""
        flags = {"output": "-o", "alignments": "-A"}
        return {
            flags.get(name, f"--{name.replace('_', '-')}"): getattr(self, name)
            for name in (field.name for field in dataclasses.fields(self))
            if name not in ("shuffles", "report")
        }


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """How the work is spread: backend, Dask cluster, threads and shards."""

    backend: str = "auto"  # auto | cpu | gpu
    scheduler: str | None = None  # a running Dask scheduler's address; None: start a local cluster
    cpus: int | None = None  # worker threads; 0: one (hmmsearch's --cpu 0); None: every core this process may use
    db_shards: int | None = None  # shards a FASTA database is split into; None: `database_shards`
    model_shards: int | None = None  # model groups balanced by length; None: guided groups
    shard_memory: int | None = None  # bytes a worker may keep shards resident in; None: half its GPU's
    domaindef: str | None = None  # gpu | cpu: where the GPU backend runs the stages after the Forward filter

    def __post_init__(self) -> None:
        _check_choice("--backend", self.backend, BACKENDS)
        if self.scheduler is not None and not isinstance(self.scheduler, (str, os.PathLike)):
            _fail(f"--scheduler must be an address or a scheduler file, not {self.scheduler!r}")
        _check_integer("--cpu", self.cpus, 0, optional=True)
        _check_integer("--db-shards", self.db_shards, 1, optional=True)
        _check_integer("--model-shards", self.model_shards, 1, optional=True)
        if self.shard_memory is not None and not (_is_number(self.shard_memory) and self.shard_memory > 0):
            _fail(f"--shard-memory must be more than 0, not {self.shard_memory!r}")
        if self.domaindef is not None:
            _check_choice("--domaindef", self.domaindef, DOMAINDEFS)

    @property
    def domains_on(self) -> str:
        """Where the GPU backend runs the stages after the Forward filter: as asked, else the GPU."""
        return self.domaindef or "gpu"

    @property
    def threads(self) -> int | None:
        """The worker threads asked for, at least one; None: every core this process may use."""
        return None if self.cpus is None else max(1, self.cpus)

    def database_shards(self, program: str) -> int:
        """The shards `program` splits a FASTA database into: `db_shards`, else one, or for
        jackhmmer one per worker thread, so that its query's rounds use every thread."""
        if self.db_shards is not None:
            return self.db_shards
        return (self.threads or available_cpus()) if program == "jackhmmer" else 1


#: The amino acid substitution matrices built into Easel, which phmmer's `--mx` names.
BUILT_IN_MATRICES = ("PAM30", "PAM70", "PAM120", "PAM240", "BLOSUM45", "BLOSUM50", "BLOSUM62", "BLOSUM80", "BLOSUM90")


@dataclasses.dataclass(frozen=True)
class PhmmerOptions:
    """phmmer's own options, with phmmer 3.4's defaults and checks: the score system and E-value
    calibration of its single-sequence builder."""

    popen: float = 0.02  # gap open probability
    pextend: float = 0.4  # gap extend probability
    mx: str = "BLOSUM62"  # a built-in substitution matrix
    EmL: int = 200  # length and number of sequences for the MSV Gumbel mu fit
    EmN: int = 200
    EvL: int = 200  # ... for the Viterbi Gumbel mu fit
    EvN: int = 200
    EfL: int = 100  # ... for the Forward exponential tail tau fit
    EfN: int = 200
    Eft: float = 0.04  # tail mass for the Forward tau fit

    def __post_init__(self) -> None:
        for name, low, high in (("popen", 0.0, 0.5), ("pextend", 0.0, 1.0)):
            value = getattr(self, name)
            if not (_is_number(value) and low <= value < high):
                raise GpuhmmError(f"--{name}", f"must be a number in {low:g} <= x < {high:g}, not {value!r}")
        for name in ("EmL", "EmN", "EvL", "EvN", "EfL", "EfN"):
            _check_integer(f"--{name}", getattr(self, name), 1)
        if not (_is_number(self.Eft) and 0 < self.Eft < 1):
            raise GpuhmmError("--Eft", f"must be a number in 0 < x < 1, not {self.Eft!r}")
        if self.mx not in BUILT_IN_MATRICES:
            raise GpuhmmError("--mx", f"no matrix named {self.mx} is available as a built-in")

    def command_line(self) -> list[str]:
        """The options that differ from phmmer's defaults, as words of its command line."""
        changed = [field.name for field in dataclasses.fields(self) if getattr(self, field.name) != field.default]
        return [word for name in changed for word in (f"--{name}", str(getattr(self, name)))]

    def builder_arguments(self) -> dict[str, Any]:
        """Keyword arguments for `pyhmmer.plan7.Builder`, as phmmer configures its builder."""
        arguments = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        arguments["score_matrix"] = arguments.pop("mx")
        return arguments


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
        if not (_is_integer(self.max_iterations) and self.max_iterations >= 1):
            raise GpuhmmError("-N", f"must be an integer >= 1, not {self.max_iterations!r}")
        if self.seq_limit is not None and not (_is_integer(self.seq_limit) and self.seq_limit >= 1):
            raise GpuhmmError("--seq_limit", f"must be an integer >= 1, not {self.seq_limit!r}")
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

    @staticmethod
    def check_search(options: SearchOptions) -> None:
        """jackhmmer refuses the model cutoffs: its models have none."""
        if options.cut is not None:
            raise GpuhmmError(f"--cut_{options.cut}", "jackhmmer does not accept model cutoffs")


#: Easel's names of the sequence file formats (`esl_sqio_EncodeFormat`), which HMMER's `--qformat`
#: and `--tformat` take in any case: unaligned formats, then alignments, whose sequences are
#: read one by one without their gaps.
SEQUENCE_FORMATS = tuple(
    "fasta embl genbank ddbj uniprot ncbi daemon hmmpgmd fmindex "
    "stockholm pfam a2m psiblast selex afa clustal clustallike phylip phylips".split()
)


@dataclasses.dataclass(frozen=True)
class SequenceFormats:
    """The formats asserted for the query and the target sequence files, as HMMER's `--qformat`
    and `--tformat` name them (one of `SEQUENCE_FORMATS`, in any case; the report's header
    prints them as given). None: the format is detected, as Easel detects it."""

    qformat: str | None = None
    tformat: str | None = None

    def __post_init__(self) -> None:
        for flag, value in (("--qformat", self.qformat), ("--tformat", self.tformat)):
            if value is not None and not (isinstance(value, str) and value.lower() in SEQUENCE_FORMATS):
                raise GpuhmmError(
                    flag, f"{value} is not a recognized sequence file format ({', '.join(SEQUENCE_FORMATS)})"
                )

    @property
    def query(self) -> str | None:
        """The query file's format as Easel names it, or None."""
        return self.qformat.lower() if self.qformat else None

    @property
    def target(self) -> str | None:
        """The target file's format as Easel names it, or None."""
        return self.tformat.lower() if self.tformat else None
