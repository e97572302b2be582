"""Where the reference HMMER 3.4 binaries are: the `hmmer` wheel's own folder, else PATH.

The wheel's folder comes first: its PATH entry points are wrappers that rename the program in
the tables' footer and turn an abort into exit status 250.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def find_binary(name):
    """The path of HMMER's `name` binary, or None where neither the wheel nor PATH has it."""
    try:
        import hmmer  # the PyPI package that ships HMMER's binaries
    except ImportError:
        return shutil.which(name)
    candidate = Path(hmmer.__file__).parent / "data" / "bin" / name
    return str(candidate) if os.access(candidate, os.X_OK) else shutil.which(name)
