"""The worker side of a search: the tasks a Dask worker runs, and the state it keeps between them."""

from .state import STATE, prepare_worker
from .tasks import run_task, scan_filter_task, scan_task

__all__ = ["STATE", "prepare_worker", "run_task", "scan_filter_task", "scan_task"]
