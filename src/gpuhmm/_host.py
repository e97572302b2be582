"""What this process may use of its host."""

from __future__ import annotations

import os


def available_cpus() -> int:
    """The cores this process may run on (a batch job's allocation, not the whole node)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
