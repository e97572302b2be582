"""The one exception type that gpuhmm reports to users as a one-line error."""

from __future__ import annotations

import os


class GpuhmmError(Exception):
    """Bad input or a bad option: the message names the file (or option) and the problem.

    The CLI prints it on one line, without a traceback, and exits non-zero. Both parts are
    kept in `args`, so the error survives pickling back from a remote Dask worker.
    """

    def __init__(self, source: str | os.PathLike | None, problem: str) -> None:
        super().__init__(None if source is None else str(source), problem)

    @property
    def source(self) -> str | None:
        return self.args[0]

    @property
    def problem(self) -> str:
        return self.args[1]

    def __str__(self) -> str:
        return self.problem if self.source is None else f"{self.source}: {self.problem}"
