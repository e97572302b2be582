"""A target sequence as the stages after the Forward filter read it: HMMER's `ESL_SQ` names and
digital residues."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class Target:
    """What the tail reads of a target sequence (`ESL_SQ`): names ("" when unset) and residues."""

    name: str
    accession: str
    description: str
    residues: np.ndarray  # uint8 digital codes, residue i at index i − 1

    @classmethod
    def from_digital(cls, sequence):
        """From a pyhmmer DigitalSequence."""
        return cls(
            name=sequence.name,
            accession=sequence.accession,
            description=sequence.description,
            residues=np.asarray(sequence.sequence, dtype=np.uint8),
        )
