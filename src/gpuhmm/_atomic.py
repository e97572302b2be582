"""All-or-nothing files that gpuhmm owns (database shards, manifests, hits files): nothing appears
under its final name unless every file is whole."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


@contextlib.contextmanager
def atomic_outputs(*paths):
    """Yield temporary sibling paths; rename them all onto `paths` only if the block succeeds.

    A failure (bad input found late, an interrupt) removes the temporaries and leaves any
    earlier outputs as they were, so a half-written table never carries a final name.
    """
    finals = [Path(path) for path in paths]
    temporaries = [path.with_name(f".{path.name}.tmp{os.getpid()}") for path in finals]
    try:
        for final in finals:
            final.parent.mkdir(parents=True, exist_ok=True)
        yield temporaries
        for temporary, final in zip(temporaries, finals):
            os.replace(temporary, final)
    finally:
        for temporary in temporaries:
            temporary.unlink(missing_ok=True)
