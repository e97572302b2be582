"""HMMER 3.4's striped float parameters (`P7_OPROFILE`, `impl_sse/p7_oprofile.c`) as every stage
after the Forward filter reads them.

`StripedProfile`: `rfv` (match emission odds ratios) and `tfv` (transition probabilities) in
HMMER's striped layout: Q = max(2, ⌈M/4⌉) vectors of 4 float32 lanes, node k = z·Q + q + 1 in
lane z of vector q, and lanes past node M zero (`fb_conversion`). BM, MM, IM and DM are the
transitions *into* the lane's node (zero for MM, IM, DM of node 1); MD, MI, II and DD lead *out*
of it (zero at node M). They are read from the `.h3p` bytes through
`stages.fwdfilter.ForwardProfile`, whose node-order arrays keep those zeros. The kernels set the
special-state transitions themselves, for each target's length (`reconfigured` in
`kernels/tail/domaindef.cuh`).
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

from ..fwdfilter import ForwardProfile

F32 = np.float32

#: Rows of `StripedProfile.transitions`, in `p7o_tsc_e` order, then DD (`tfv[7Q + q]`).
BM, MM, IM, DM, MD, MI, II, DD = range(8)

#: Easel's degenerate residues and their canonical members (`esl_alphabet.c`, create_amino,
#: create_dna, create_rna); the all-degenerate residue (code Kp − 3) stands for every one.
_DEGENERATE = {
    "amino": dict(B="ND", J="IL", Z="QE", U="C", O="K"),
    "dna": dict(R="AG", Y="CT", M="AC", K="GT", S="CG", W="AT", H="ACT", B="CGT", V="ACG", D="AGT"),
    "rna": dict(R="AG", Y="CU", M="AC", K="GU", S="CG", W="AU", H="ACU", B="CGU", V="ACG", D="AGU"),
}


def striped_count(M):
    """`p7O_NQF`: vectors of 4 float lanes for M nodes."""
    return max(2, (M - 1) // 4 + 1)


@dataclasses.dataclass(frozen=True)
class AlphabetCodes:
    """What the tail needs of an Easel alphabet: symbols by digital code, K canonical residues of
    Kp codes, and for each degenerate code K+1..Kp−3 its canonical members, ascending."""

    symbols: str
    K: int
    Kp: int
    degenerate: tuple[tuple[int, ...], ...]

    @classmethod
    def from_alphabet(cls, alphabet):
        symbols, K, Kp = alphabet.symbols, alphabet.K, alphabet.Kp
        kind = "amino" if alphabet.is_amino() else "dna" if alphabet.is_dna() else "rna"
        members = {symbol: sorted(symbols.index(c) for c in canon) for symbol, canon in _DEGENERATE[kind].items()}
        members[symbols[Kp - 3]] = list(range(K))
        degenerate = tuple(tuple(members[symbols[x]]) for x in range(K + 1, Kp - 2))
        return cls(symbols=symbols, K=K, Kp=Kp, degenerate=degenerate)

    def code(self, symbol):
        """`esl_abc_DigitizeSymbol` for a residue symbol, either case."""
        return self.symbols.index(symbol.upper())


@dataclasses.dataclass(frozen=True)
class StripedProfile:
    """One model's `P7_OPROFILE` float parameters and the annotation `p7_alidisplay_Create` prints."""

    name: bytes  # as HMMER holds it, whatever its encoding
    accession: bytes | None
    description: bytes | None
    M: int
    emissions: np.ndarray  # float32 (Kp, Q, 4): rfv
    transitions: np.ndarray  # float32 (8, Q, 4): tfv rows BM..II, then DD
    consensus: str  # M characters: om->consensus[1..M]
    reference: str | None  # om->rf[1..M], None where the model has none
    structure: str | None  # om->cs[1..M]
    alphabet: AlphabetCodes
    tau: float  # Forward exponential tail location (FTAU), a float32 value
    lam: float  # Forward exponential tail slope (FLAMBDA), a float32 value

    @property
    def Q(self):
        return self.emissions.shape[1]

    @classmethod
    def from_configured(cls, optimized, data, nodes=None):
        """From an OptimizedProfile and the `.h3p` bytes it writes (`vitfilter.configured`), or
        from its `nodes` (a `fwdfilter.ForwardProfile`) where those are read already."""
        nodes = nodes or ForwardProfile.from_h3p(data, optimized)
        M, Q = optimized.M, striped_count(optimized.M)
        k = np.arange(M)
        q, z = k % Q, k // Q

        def stripe(by_node):
            striped = np.zeros(by_node.shape[:-1] + (Q, 4), dtype=F32)
            striped[..., q, z] = by_node
            return striped

        parameters = optimized.evalue_parameters.as_vector()
        name, accession, description = _h3p_text(data)
        return cls(
            name=name,
            accession=accession,
            description=description,
            M=M,
            emissions=stripe(nodes.emissions),
            transitions=stripe(nodes.transitions),
            consensus=optimized.consensus,
            reference=optimized.reference,
            structure=optimized.consensus_structure,
            alphabet=AlphabetCodes.from_alphabet(optimized.alphabet),
            tau=float(F32(parameters[4])),
            lam=float(F32(parameters[5])),
        )


def _h3p_text(data):
    """The name, accession and description (None where unset) at the head of `.h3p` bytes, as
    `p7_oprofile_Write` puts them: magic, M, alphabet, then each as its length and its bytes
    with their NUL (the length 0 alone where unset; the name is always there)."""
    at, fields = 12, []
    for index in range(3):
        (size,) = struct.unpack_from("<i", data, at)
        at += 4
        if size or index == 0:
            fields.append(bytes(data[at : at + size]))
            at += size + 1
        else:
            fields.append(None)
    return tuple(fields)
