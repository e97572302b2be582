"""HMMER 3.4's first filter stage (`p7_MSVFilter`, which runs `p7_SSVFilter` first) on the host.

The kernels (GPU, or the numpy reference, `engine.reference`) return raw integers per (model,
sequence); this module states how they become exactly what HMMER decides (on the GPU,
kernels/f1.cu takes the same steps, `f1_outcome`):

* SSV: the best diagonal score `T` in HMMER's unsigned-byte units above the begin level
  (HMMER's signed `xE` is `T + 128`). `ssvfilter.c` then either knows the answer (a score, or an
  overflow that the MSV filter would also hit) or says that full MSV must decide.
* MSV: the final `xJ` byte, or `MSV_OVERFLOW` where `xE + bias` reached 255.
* F1: `p7_Pipeline`'s P-value, `esl_gumbel_surv((usc − nullsc)/ln 2, μ, λ)`, in HMMER's float
  and double steps, compared with F1; decided on the bit score against `pass_threshold`.

The per-length terms (`tjb`, the null1 score) come from pyhmmer itself, so no float32 log
needs to match glibc's.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyhmmer.easel
import pyhmmer.plan7

from .._memo import memoized
from ..hits.text import label

#: Kernel output for a sequence whose MSV score overflowed (HMMER returns +inf: it passes).
MSV_OVERFLOW = -1

#: Decisions of `ssv_outcome`.
SSV_SCORED, SSV_OVERFLOW, SSV_UNDECIDED = 0, 1, 2

#: Rows of the emission tables past the alphabet's Kp: warp-block padding and end of sequence.
PAD_CODE, END_CODE = 29, 30
TABLE_ROWS = 31


@dataclasses.dataclass(frozen=True)
class MsvModel:
    """One model's MSV parameters, as HMMER's optimized profile holds them.

    `costs[x, k]` is `rbv` un-striped: the biased byte cost of residue x at node k+1.
    """

    name: str
    M: int
    costs: np.ndarray  # uint8 (Kp, M)
    bias: int
    base: int
    scale: float  # float32 value of scale_b
    tbm: int
    tec: int
    mu: float  # MSV Gumbel location (MMU), float32
    lam: float  # MSV Gumbel slope (MLAMBDA), float32

    @classmethod
    def from_hmm(cls, hmm, background, optimized=None):
        """From `hmm`, or from its OptimizedProfile as hmmsearch configures it (L = 400) where
        the caller has one."""
        optimized = configured_profile(hmm, background) if optimized is None else optimized
        striped = np.asarray(optimized.rbv)
        quads = striped.shape[1] // 16
        nodes = np.arange(hmm.M)
        costs = np.ascontiguousarray(striped[:, (nodes % quads) * 16 + nodes // quads])
        parameters = list(hmm.evalue_parameters.as_vector())
        return cls(
            name=label(hmm),
            M=hmm.M,
            costs=costs,
            bias=optimized.bias_b,
            base=optimized.base_b,
            scale=optimized.scale_b,
            tbm=optimized.tbm,
            tec=optimized.tec,
            mu=parameters[0],
            lam=parameters[1],
        )


def configured_profile(hmm, background):
    """`hmm`'s OptimizedProfile as hmmsearch configures it, and as hmmpress stores it for
    hmmscan: local multihit, for a target length of 400 (each target then sets its own)."""
    profile = pyhmmer.plan7.Profile(hmm.M, hmm.alphabet)
    profile.configure(hmm, background, L=400)
    return profile.to_optimized()


def msv_models(hmms, optimized=None):
    """Each model's MsvModel; `optimized`, where given, their configured OptimizedProfiles."""
    background = pyhmmer.plan7.Background(hmms[0].alphabet) if hmms else None
    return [MsvModel.from_hmm(hmm, background, profile) for hmm, profile in zip(hmms, optimized or [None] * len(hmms))]


@dataclasses.dataclass(frozen=True)
class LengthTerms:
    """`tjb` and the null1 score for each target length, from pyhmmer (exactly HMMER's floats)."""

    lengths: np.ndarray  # sorted distinct lengths
    tjb: np.ndarray  # uint8
    null1: np.ndarray  # float32 nats

    @classmethod
    def for_lengths(cls, alphabet, lengths):
        lengths = np.unique(np.asarray(lengths, dtype=np.int64))
        known = _BY_LENGTH.setdefault(alphabet.symbols, {0: (0, 0.0)})  # the pipeline skips empty targets
        missing = [length for length in lengths.tolist() if length not in known]
        if missing:
            background = pyhmmer.plan7.Background(alphabet)
            probe = _length_probe(alphabet, background)
            for length in missing:
                probe.L = background.L = length
                placeholder = pyhmmer.easel.DigitalSequence(alphabet, sequence=bytes(length))
                known[length] = (probe.tjb, background.null1(placeholder))  # null1 reads only the length
        tjb, null1 = zip(*(known[length] for length in lengths.tolist())) if len(lengths) else ((), ())
        return cls(lengths, np.array(tjb, dtype=np.uint8), np.array(null1, dtype=np.float32))

    def lookup(self, lengths):
        where = np.searchsorted(self.lengths, lengths)
        return self.tjb[where], self.null1[where]


#: Per alphabet (its symbols), each target length's (tjb, null1) once computed: every shard's
#: lengths are mostly the same few thousand.
_BY_LENGTH: dict = {}


def _length_probe(alphabet, background):
    """Any optimized profile: `tjb` depends only on the target length."""
    return configured_profile(pyhmmer.plan7.HMM.sample(alphabet, 2, pyhmmer.easel.Randomness(1)), background)


def ssv_outcome(model, best, tjb):
    """`p7_SSVFilter`'s answer from the kernel's best diagonal score (arrays over sequences).

    Returns (decision, xJ): xJ is the final J byte where the decision is SSV_SCORED.
    """
    best = best.astype(np.int64)
    tjbm = tjb.astype(np.int64) + model.tbm
    decision = np.full(best.shape, SSV_SCORED, dtype=np.int8)
    unsafe = tjbm + model.tec + model.bias >= 127
    overflow = best + 128 >= 255 - model.bias
    certain = model.base - tjbm >= 128
    decision[overflow] = np.where(certain[overflow], SSV_OVERFLOW, SSV_UNDECIDED)
    x_e = best + model.base - tjbm
    decision[~overflow & (x_e >= 255 - model.bias)] = SSV_OVERFLOW
    x_j = x_e - model.tec
    scored = decision == SSV_SCORED
    decision[scored & (x_j > model.base)] = SSV_UNDECIDED
    decision[unsafe] = SSV_UNDECIDED
    return decision, x_j


def scores_from_xj(base, scale, x_j, tjb):
    """HMMER's float steps: ((float)(xJ − tjb) − (float)base) / scale_b − 3.0, in nats. `base`
    and `scale` are a model's, or one per element."""
    numerator = (np.asarray(x_j, dtype=np.int64) - tjb).astype(np.float32) - np.asarray(base).astype(np.float32)
    return (numerator / np.asarray(scale, dtype=np.float32) - np.float32(3.0)).astype(np.float32)


#: Outcomes of the F1 decision (kernels/f1.cu, `f1_outcome`).
F1_FAIL, F1_PASS, F1_UNDECIDED = 0, 1, 2


def f1_outcome(model, best, tjb, null1, lengths, threshold):
    """kernels/f1.cu in numpy: per sequence, the F1 outcome and the MSV score (nats, +inf for an
    overflow; meaningful where the outcome is F1_PASS) from SSV's best bytes. `threshold` is
    `pass_threshold`'s bit score."""
    decision, x_j = ssv_outcome(model, best, tjb)
    scores = scores_from_xj(model.base, model.scale, x_j, tjb)
    scores[decision == SSV_OVERFLOW] = np.inf
    outcome = np.where(score_bits(scores, null1) >= threshold, F1_PASS, F1_FAIL).astype(np.uint8)
    outcome[decision == SSV_UNDECIDED] = F1_UNDECIDED
    outcome[np.asarray(lengths) == 0] = F1_FAIL
    return outcome, scores


def pair_gains(model, H):
    """kernels/msvpairs.cu's table: int16 [residue][h][lane], bias − cost of node lane·H + h + 1,
    and −255 (a cell that can only fall to 0) past M."""
    return memoized(model, ("pair gains", H), lambda: _pair_gains(model, H))


def _pair_gains(model, H):
    Kp = model.costs.shape[0]
    gains = np.full((Kp, 32 * H), -255, dtype=np.int16)
    gains[:, : model.M] = model.bias - model.costs.astype(np.int16)
    return np.ascontiguousarray(gains.reshape(Kp, 32, H).transpose(0, 2, 1))


def score_bits(scores, null):
    """`p7_Pipeline`'s bit score: the float difference, divided by ln 2 in double, stored as float."""
    return ((scores - null).astype(np.float32).astype(np.float64) / math.log(2)).astype(np.float32)


def gumbel_pvalues(scores, null, mu, lam):
    """`esl_gumbel_surv((score − null)/ln 2, μ, λ)` as `p7_Pipeline` computes it: the bit score
    (`score_bits`), then the survival function in double."""
    return _survival(score_bits(scores, null), mu, lam, np.isposinf(scores))


def _survival(bits, mu, lam, infinite):
    y = np.float64(lam) * (bits.astype(np.float64) - np.float64(mu))
    with np.errstate(over="ignore", invalid="ignore"):
        ey = -np.exp(-y)
        pvalues = np.where(np.abs(ey) < 5e-9, -ey, 1.0 - np.exp(ey))
    pvalues[infinite] = 0.0
    return pvalues


def _float_of(ordered):
    """The float32 whose sign-magnitude bit pattern has this rank (0 is +0.0), as an array."""
    ordered = np.asarray(ordered, dtype=np.int64)
    pattern = np.where(ordered >= 0, ordered, (1 << 31) - ordered).astype(np.uint32)
    return pattern.view(np.float32)


def pass_threshold(mu, lam, F):
    """The least float32 bit score b with P(b) ≤ F, P the survival function `p7_Pipeline`
    evaluates (`gumbel_pvalues`), found by bisection over the float32 values in order.

    P is non-increasing in b, so `bits ≥ pass_threshold(...)` decides exactly as `P ≤ F` does
    (tests/test_msv.py checks it over a window of float32 values on each side); computing the
    bit score is far cheaper than the double exp of every P-value. Where no score passes, not
    even an overflow's +inf (F < 0), the threshold is NaN, which no comparison passes.
    """
    return pass_thresholds([mu], [lam], F)[0]


def pass_thresholds(mu, lam, F):
    """`pass_threshold` for many models at once: their (μ, λ) as sequences."""
    mu, lam = np.asarray(mu, dtype=np.float64), np.asarray(lam, dtype=np.float64)
    none = np.zeros(len(mu), dtype=bool)

    def passes(rank):
        return _survival(_float_of(rank), mu, lam, none) <= F

    low = np.full(len(mu), -(1 << 31) + (1 << 23), dtype=np.int64)  # the ranks of −inf and +inf
    high = np.full(len(mu), (1 << 31) - (1 << 23), dtype=np.int64)
    always, never = passes(low), ~passes(high)
    while (high - low > 1).any():
        middle = (low + high) // 2
        moves_high = passes(middle)
        high = np.where(moves_high, middle, high)
        low = np.where(moves_high, low, middle)
    thresholds = _float_of(high)
    thresholds[always] = -np.inf
    thresholds[never] = np.nan
    return thresholds


#: f1.cu's F1Parameters and msvpairs.cu's MsvPairParameters, field for field.
F1_PARAMETERS = np.dtype(
    [("base", "<i4"), ("bias", "<i4"), ("tbm", "<i4"), ("tec", "<i4"), ("scale", "<f4"), ("threshold", "<f4")]
)
MSV_PAIR_PARAMETERS = np.dtype(
    [("base", "<i4"), ("bias", "<i4"), ("tbm", "<i4"), ("tec", "<i4"), ("offset", "<i8")], align=True
)


def f1_parameters(models, thresholds):
    """f1.cu's parameters of each model, with its F1 pass threshold (bits)."""
    parameters = np.zeros(len(models), dtype=F1_PARAMETERS)
    for field in ("base", "bias", "tbm", "tec", "scale"):
        parameters[field] = [getattr(m, field) for m in models]
    parameters["threshold"] = thresholds
    return parameters


def pair_parameters(models, H):
    """msvpairs.cu's gain tables of `models` end to end, and each model's parameters."""
    gains = [pair_gains(model, H) for model in models]
    parameters = np.zeros(len(models), dtype=MSV_PAIR_PARAMETERS)
    for field in ("base", "bias", "tbm", "tec"):
        parameters[field] = [getattr(m, field) for m in models]
    parameters["offset"] = np.concatenate([[0], np.cumsum([g.size for g in gains])[:-1]])
    return np.concatenate([g.reshape(-1) for g in gains]), parameters
