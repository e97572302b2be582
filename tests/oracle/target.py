"""A target sequence as the reference of the stages after the Forward filter reads it: HMMER's
`ESL_SQ` names and digital residues."""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuhmm.hits.text import sequence_text


@dataclasses.dataclass(frozen=True)
class Target:
    """What the tail reads of a target sequence (`ESL_SQ`): names as Easel's bytes (b"" when
    unset) and residues."""

    name: bytes
    accession: bytes
    description: bytes
    residues: np.ndarray  # uint8 digital codes, residue i at index i − 1

    @classmethod
    def from_digital(cls, sequence):
        """From a pyhmmer DigitalSequence."""
        name, accession, description = sequence_text(sequence)
        return cls(
            name=name,
            accession=accession,
            description=description,
            residues=np.asarray(sequence.sequence, dtype=np.uint8),
        )
