"""squall: a distributed task scheduler with a Rust scheduling core, drop-in for Dask."""

from squall import sim
from squall._core import (
    Commands,
    CycleError,
    DuplicateKeyError,
    InternalError,
    Scheduler,
    SchedulerError,
    StaleReportError,
    UnknownDependencyError,
    UnknownKeyError,
    UnknownTaskError,
    UnknownWorkerError,
    __version__,
)
from squall.ordering import order

__all__ = [
    "Commands",
    "CycleError",
    "DuplicateKeyError",
    "InternalError",
    "Scheduler",
    "SchedulerError",
    "StaleReportError",
    "UnknownDependencyError",
    "UnknownKeyError",
    "UnknownTaskError",
    "UnknownWorkerError",
    "__version__",
    "order",
    "sim",
]
