"""The one exception type that gpuhmm reports to users as a one-line error."""


class GpuhmmError(Exception):
    """Bad input or a bad option: the message names the file (or option) and the problem.

    The CLI prints it on one line, without a traceback, and exits non-zero. Both parts are
    kept in `args`, so the error survives pickling back from a remote Dask worker.
    """

    def __init__(self, source, problem):
        super().__init__(None if source is None else str(source), problem)

    @property
    def source(self):
        return self.args[0]

    @property
    def problem(self):
        return self.args[1]

    def __str__(self):
        return self.problem if self.source is None else f"{self.source}: {self.problem}"
