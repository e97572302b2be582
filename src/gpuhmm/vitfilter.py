"""HMMER 3.4's second filter stages on the host: the bias filter and `p7_ViterbiFilter`.

* `ViterbiProfile` holds the 16-bit Viterbi parameters exactly as HMMER's optimized profile
  does (`rwv`, `twv`, `xw`, `base_w`, `scale_w`, `ddbound_w`), read from the bytes that
  `OptimizedProfile.write` produces (`impl_sse/io.c`, `p7_oprofile_Write`).
* `viterbi_scores` is a numpy model of `impl_sse/vitfilter.c`: the same striped int16 vectors,
  saturating adds, the delayed M→D store and the Lazy-F D→D sweeps gated by `ddbound_w`, run for
  a batch of sequences in lock step. It is the oracle the GPU Viterbi kernel is checked against.
* `bias_scores` is `p7_bg_FilterScore`: the two-state composition HMM's Forward score
  (`esl_hmm_Forward`) in float32 with per-row rescaling, plus its length terms.
* `second_stage` applies `p7_Pipeline`'s bias and Viterbi decisions to MSV survivors.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import dataclasses
import functools
import io
import math
import struct

import numpy as np

from .msv import configured_profile, gumbel_pvalues

NEG_INF_WORD = -32768
_E, _N, _J, _C = 0, 1, 2, 3
_MOVE, _LOOP = 0, 1
_H3P_MAGIC = 0xB3E6F0F3

#: Residues each amino-acid degeneracy code stands for (Easel's amino alphabet, codes 21–26).
_AMINO_DEGENERACIES = {21: "DN", 22: "IL", 23: "EQ", 24: "K", 25: "C", 26: "ACDEFGHIKLMNPQRSTVWY"}


@functools.cache
def _logf():
    """The C library's float `logf`: HMMER's length terms are rounded through it."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.logf.restype = ctypes.c_float
    libm.logf.argtypes = [ctypes.c_float]
    return libm.logf


def _words(count):
    """HMMER's `p7O_NQW`: striped vectors of 8 int16 lanes for `count` nodes."""
    return max(2, (count - 1) // 8 + 1)


def _floats(count):
    return max(2, (count - 1) // 4 + 1)


def _wordify(scale_w, score):
    """`p7_oprofile.c` wordify(): roundf(scale·sc) clamped to int16 (half away from zero)."""
    value = float(np.float32(scale_w) * np.float32(score))
    value = math.copysign(math.floor(abs(value) + 0.5), value)
    return int(min(max(value, -32768.0), 32767.0))


@dataclasses.dataclass(frozen=True)
class ViterbiProfile:
    """One model's `p7_ViterbiFilter` and bias-filter parameters, as HMMER holds them."""

    name: str
    M: int
    rwv: np.ndarray  # int16 (Kp, Q, 8): emission words, lane z of vector q is node q + 1 + z·Q
    twv: np.ndarray  # int16 (8Q, 8): per q BM, MM, IM, DM, MD, MI, II; then Q vectors of DD
    xw: np.ndarray  # int16 (4, 2): [E, N, J, C] × [MOVE, LOOP] (MOVEs of N, J, C are per length)
    scale_w: float
    base_w: int
    ddbound_w: int
    nj: float  # expected J uses (0 unihit, 1 multihit), for the per-length MOVE words
    mu: float  # Viterbi Gumbel location (VMU)
    lam: float  # Viterbi Gumbel slope (VLAMBDA)
    composition: np.ndarray  # float32 (K,): the model's mean residue composition

    @property
    def Q(self):
        return self.rwv.shape[1]

    @functools.cached_property
    def node_emissions(self):
        """`rwv` in node order, int32 (Kp, M): column k − 1 is node k."""
        k = np.arange(self.M)
        return self.rwv[:, k % self.Q, k // self.Q].astype(np.int32)

    @functools.cached_property
    def node_transitions(self):
        """`twv` in node order, int32 (8, M): BM, MM, IM, DM, MD, MI, II, DD of node k at k − 1."""
        Q, k = self.Q, np.arange(self.M)
        q, z = k % Q, k // Q
        transitions = np.empty((8, self.M), dtype=np.int32)
        transitions[:7] = self.twv[: 7 * Q].reshape(Q, 7, 8)[q, :, z].T
        transitions[7] = self.twv[7 * Q:][q, z]
        return transitions

    @classmethod
    def from_h3p(cls, data, optimized, hmm):
        """From `optimized` and the `.h3p` bytes it writes (`configured`)."""
        M, Kp = optimized.M, hmm.alphabet.Kp
        Q8, Q4 = _words(M), _floats(M)
        # Parse from the end: the name, accession and description ahead are variable length.
        tail = 128 * Q4 + 16 * Kp * Q4 + 8 * 4 + 6 * 4 + 4 + 4 + 4 + 4
        start = len(data) - tail - (128 * Q8 + 16 * Kp * Q8 + 16 + 4 + 2 + 2 + 4)
        if struct.unpack_from("<I", data, 0)[0] != _H3P_MAGIC:
            raise ValueError(f"{hmm.name}: not an HMMER optimized profile")
        twv = np.frombuffer(data, "<i2", 8 * Q8 * 8, start).reshape(8 * Q8, 8)
        start += twv.nbytes
        rwv = np.frombuffer(data, "<i2", Kp * Q8 * 8, start).reshape(Kp, Q8, 8)
        start += rwv.nbytes
        xw = np.frombuffer(data, "<i2", 8, start).reshape(4, 2)
        scale_w, base_w, ddbound_w = struct.unpack_from("<fhh", data, start + 16)
        nj = struct.unpack_from("<f", data, len(data) - 16)[0]
        parameters = hmm.evalue_parameters.as_vector()
        return cls(
            name=hmm.name, M=M, rwv=rwv.astype(np.int16), twv=twv.astype(np.int16),
            xw=xw.astype(np.int16), scale_w=scale_w, base_w=base_w, ddbound_w=ddbound_w, nj=nj,
            mu=float(np.float32(parameters[2])), lam=float(np.float32(parameters[3])),
            composition=np.asarray(optimized.compositions, dtype=np.float32)[: hmm.alphabet.K],
        )

    def move_word(self, length):
        """`ReconfigRestLength`: the N, J and C MOVE word for a target of `length` residues."""
        nj = np.float32(self.nj)
        pmove = (np.float32(2.0) + nj) / (np.float32(length) + np.float32(2.0) + nj)
        return _wordify(self.scale_w, _logf()(float(pmove)))


def configured(hmms, background):
    """Per model, its OptimizedProfile as hmmsearch configures it (L = 400) and the `.h3p` bytes
    it writes, where the Viterbi and Forward filters read their parameters (pyhmmer exposes
    only some of them)."""
    written = []
    for hmm in hmms:
        optimized = configured_profile(hmm, background)
        filter_bytes, profile_bytes = io.BytesIO(), io.BytesIO()
        optimized.write(filter_bytes, profile_bytes)
        written.append((optimized, profile_bytes.getvalue()))
    return written


def viterbi_profiles(hmms, background, written=None):
    written = written or configured(hmms, background)
    return [ViterbiProfile.from_h3p(data, optimized, hmm) for hmm, (optimized, data) in zip(hmms, written)]


def _adds(a, b):
    """`_mm_adds_epi16`."""
    return np.clip(a.astype(np.int32) + b, -32768, 32767).astype(np.int16)


def _shift_in(vectors):
    """`_mm_slli_si128(v, 2)` with −inf in lane 0: lane z takes lane z−1 (last axis)."""
    shifted = np.empty_like(vectors)
    shifted[..., 1:] = vectors[..., :-1]
    shifted[..., 0] = NEG_INF_WORD
    return shifted


def viterbi_scores(profile, sequences):
    """`p7_ViterbiFilter` scores (float32 nats; +inf on overflow) for digital sequences.

    `sequences` is a list of uint8 arrays of residue codes, run in lock step, longest first, each
    leaving the batch after its last row. Within a row every vector q depends only on the
    previous row, except for the D→D chain; so M, I and the delayed M→D values are computed for
    all q at once, and the Lazy-F sweeps are replaced by the closure they converge to, a max-plus
    prefix scan along the nodes (exact: D→D and M→D words are ≤ 0, so saturation is only ever
    the floor).
    """
    scores = np.full(len(sequences), -np.inf, dtype=np.float32)
    order = sorted(range(len(sequences)), key=lambda b: -len(sequences[b]))
    order = [b for b in order if len(sequences[b])]
    if not order:
        return scores
    lengths = np.array([len(sequences[b]) for b in order], dtype=np.int64)
    B, Q = len(order), profile.Q
    codes = np.zeros((B, int(lengths[0])), dtype=np.intp)
    for row, b in enumerate(order):
        codes[row, : lengths[row]] = sequences[b]
    bm, mm, im, dm, md, mi, ii = np.moveaxis(profile.twv[: 7 * Q].astype(np.int32).reshape(Q, 7, 8), 1, 0)
    dd_nodes = profile.twv[7 * Q:].astype(np.int64).T.reshape(-1)  # node order: k = z·Q + q + 1
    chain = np.concatenate([[0], np.cumsum(dd_nodes[:-1])])
    xw = profile.xw.astype(np.int64)
    move = np.array([profile.move_word(n) for n in lengths], dtype=np.int64)

    mmx = np.full((B, Q, 8), NEG_INF_WORD, np.int16)
    imx, dmx = mmx.copy(), mmx.copy()
    xN = np.full(B, profile.base_w, np.int64)
    xB = xN + move
    xJ = np.full(B, NEG_INF_WORD, np.int64)
    xC = xJ.copy()
    overflow = np.zeros(B, dtype=bool)
    for i in range(int(lengths[0])):
        n = int(np.count_nonzero(lengths > i))  # the sequences still running: a prefix
        mmx, imx, dmx, xN, xB, xJ, xC = mmx[:n], imx[:n], dmx[:n], xN[:n], xB[:n], xJ[:n], xC[:n]
        m_prev = np.concatenate([_shift_in(mmx[:, Q - 1])[:, None], mmx[:, :-1]], axis=1)
        i_prev = np.concatenate([_shift_in(imx[:, Q - 1])[:, None], imx[:, :-1]], axis=1)
        d_prev = np.concatenate([_shift_in(dmx[:, Q - 1])[:, None], dmx[:, :-1]], axis=1)
        entry = np.clip(xB, -32768, 32767).astype(np.int32)[:, None, None]
        sv = _adds(entry, bm)
        sv = np.maximum(sv, _adds(m_prev, mm))
        sv = np.maximum(sv, _adds(i_prev, im))
        sv = np.maximum(sv, _adds(d_prev, dm))
        mmx_next = _adds(sv, profile.rwv[codes[:n, i]].astype(np.int32))
        imx = np.maximum(_adds(mmx, mi), _adds(imx, ii))
        mmx = mmx_next
        to_d = _adds(mmx, md)  # vector q's M→D, stored into vector q+1 (the last one wraps)
        dmx = np.concatenate([_shift_in(to_d[:, Q - 1])[:, None], to_d[:, :-1]], axis=1)
        xE = mmx.max(axis=(1, 2)).astype(np.int64)
        overflow[:n] |= xE >= 32767  # HMMER stops here with +inf; later rows cannot clear it
        xN = xN + xw[_N, _LOOP]
        xC = np.maximum(xC + xw[_C, _LOOP], xE + xw[_E, _MOVE])
        xJ = np.maximum(xJ + xw[_J, _LOOP], xE + xw[_E, _LOOP])
        xB = np.maximum(xJ + move[:n], xN + move[:n])
        # Lazy-F runs only where a D→D path could still beat entering from B (vitfilter.c).
        lazy = to_d.max(axis=(1, 2)).astype(np.int64) + profile.ddbound_w > xB
        if lazy.any():
            nodes = dmx.transpose(0, 2, 1).reshape(n, -1).astype(np.int64)
            closed = np.maximum.accumulate(nodes - chain, axis=1) + chain
            closed = np.maximum(closed, NEG_INF_WORD).astype(np.int16).reshape(n, 8, Q).transpose(0, 2, 1)
            dmx = np.where(lazy[:, None, None], closed, dmx)
        ending = lengths[:n] == i + 1
        if ending.any():
            final = np.full(n, -np.inf, dtype=np.float32)
            finite = xC > NEG_INF_WORD
            nats = (xC.astype(np.float32) + move[:n].astype(np.float32) - np.float32(profile.base_w)) / np.float32(profile.scale_w)
            final[finite] = (nats[finite].astype(np.float64) - 3.0).astype(np.float32)
            final[overflow[:n]] = np.inf
            for row in np.nonzero(ending)[0]:
                scores[order[row]] = final[row]
    return scores


def bias_scores(profile, background_frequencies, sequences):
    """`p7_bg_FilterScore` (float32 nats) for digital sequences of the amino alphabet."""
    K = len(profile.composition)
    f = np.asarray(background_frequencies, dtype=np.float32)[:K]
    odds = _emission_odds(f, profile.composition)
    L1 = np.float32(np.float32(profile.M) / np.float32(8.0))
    stay1 = L1 / (L1 + np.float32(1.0))
    leave1 = np.float32(1.0) / (L1 + np.float32(1.0))
    logf = _logf()
    scores = np.zeros(len(sequences), dtype=np.float32)
    for b, sequence in enumerate(sequences):
        L = len(sequence)
        if L == 0:
            continue
        p1 = np.float32(L) / np.float32(L + 1)
        t = np.array([[p1, np.float32(1.0) - p1], [leave1, stay1]], dtype=np.float32)
        e = odds[np.asarray(sequence, dtype=np.intp)]  # (L, 2)
        dp = e[0] * np.array([0.999, 0.001], dtype=np.float32)
        total = np.float32(0.0)
        for i in range(L):
            if i:
                dp = (np.float32(dp[0] * t[0]) + np.float32(dp[1] * t[1])) * e[i]
            peak = np.float32(max(np.float32(0.0), dp[0], dp[1]))
            dp = dp / peak
            total = np.float32(total + np.float32(math.log(float(peak))))
        total = np.float32(total + np.float32(math.log(float(np.float32(dp[0]) + np.float32(dp[1])))))
        scores[b] = np.float32(np.float32(total + np.float32(np.float32(L) * np.float32(logf(float(p1)))))
                               + np.float32(logf(float(np.float32(1.0) - p1))))
    return scores


def _emission_odds(frequencies, composition):
    """`esl_hmm_Configure`'s emission odds for the null state and the composition state."""
    K = len(frequencies)
    odds = np.ones((K + 9, 2), dtype=np.float32)  # the null state emits the background: odds 1
    odds[:K, 1] = composition / frequencies
    for code, residues in _AMINO_DEGENERACIES.items():
        members = ["ACDEFGHIKLMNPQRSTVWY".index(r) for r in residues]
        for state, emissions in enumerate((frequencies, composition)):
            numerator, denominator = np.float32(0.0), np.float32(0.0)
            for y in members:
                numerator = np.float32(numerator + emissions[y])
                denominator = np.float32(denominator + frequencies[y])
            odds[code, state] = numerator / denominator
    return odds


@dataclasses.dataclass(frozen=True)
class SecondStage:
    passed_bias: np.ndarray  # bool per sequence
    passed_viterbi: np.ndarray  # bool per sequence (HMMER's n_past_vit counts these)
    unscored: np.ndarray  # bool per sequence: passed on because `viterbi` could not score it


def second_stage(msv_scores, filter_scores, msv_gumbel, viterbi, viterbi_gumbel, F1, F2):
    """`p7_Pipeline`'s bias and Viterbi decisions for (model, sequence) pairs that passed F1.

    `filter_scores` are the bias filter's scores (`bias_scores`), or null1 for `--nobias`/`--max`.
    `msv_gumbel` and `viterbi_gumbel` are (μ, λ), scalars or one per pair. Viterbi runs only where
    the bias-corrected MSV P-value is above F2, as in HMMER: `viterbi(mask)` returns the scores of
    the pairs in `mask`, NaN where it could not score one (such a pair passes).
    """
    pvalues = gumbel_pvalues(msv_scores, filter_scores, *msv_gumbel)
    passed_bias = pvalues <= F1
    needs_viterbi = passed_bias & (pvalues > F2)
    passed_viterbi = passed_bias.copy()
    unscored = np.zeros_like(passed_bias)
    if needs_viterbi.any():
        scores = viterbi(needs_viterbi)
        mu, lam = (np.broadcast_to(np.asarray(g), pvalues.shape)[needs_viterbi] for g in viterbi_gumbel)
        unscored[needs_viterbi] = np.isnan(scores)
        passed_viterbi[needs_viterbi] = np.isnan(scores) | (gumbel_pvalues(scores, filter_scores[needs_viterbi], mu, lam) <= F2)
    return SecondStage(passed_bias, passed_viterbi, unscored)
