"""squall: a distributed task scheduler with a Rust scheduling core, drop-in for Dask."""

from squall import config, sim
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
from squall.client import Client, Future, as_completed, fire_and_forget, wait
from squall.cluster import LocalCluster
from squall.context import get_client, get_worker, rejoin, secede
from squall.ordering import order

__all__ = [
    "Client",
    "Commands",
    "CycleError",
    "DuplicateKeyError",
    "Future",
    "InternalError",
    "LocalCluster",
    "Scheduler",
    "SchedulerError",
    "StaleReportError",
    "UnknownDependencyError",
    "UnknownKeyError",
    "UnknownTaskError",
    "UnknownWorkerError",
    "__version__",
    "as_completed",
    "config",
    "fire_and_forget",
    "get_client",
    "get_worker",
    "order",
    "rejoin",
    "secede",
    "sim",
    "wait",
]
